#!/usr/bin/env bash
# A real Kubernetes control plane for the `k8s` test tier.
#
# No package registry ships kube-apiserver, so kube-apiserver,
# kube-controller-manager, kube-scheduler, kubeadm and kubectl are built from
# Debian bookworm's `kubernetes` source package (Go dependencies vendored) with
# Debian's Go, offline (GOPROXY=off), into a cache directory that survives fresh
# clones. etcd comes from Debian (etcd-server 3.4). Only the kubelet is stood in
# (tests/testbed/kubelet_standin.py): there is no container runtime here.
#
# The vendored github.com/modern-go/reflect2 1.0.1 makes the apiserver segfault
# with Go >= 1.18; it is replaced by Debian's 1.0.2 before building.
#
# Idempotent: when the five binaries are present and report the expected
# version, only that check runs (about a second). Otherwise they are rebuilt
# (about 9-10 minutes on 2 cores, 1.4 GB of memory, ~4 GB of scratch space).
# A failed build exits non-zero and leaves no binaries behind: the `k8s` tests
# then fail (they are never skipped).
set -euo pipefail

K8S_VERSION=1.20.2
CACHE="${LCCN_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lccn-subscriber}"
HOME_DIR="$CACHE/kubernetes-$K8S_VERSION"
BIN="$HOME_DIR/bin"
TOOLS=(kube-apiserver kube-controller-manager kube-scheduler kubeadm kubectl)

t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }

apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
        apt-get update -q
    fi
    if ! apt-get install -y -q --no-install-recommends "$@"; then
        apt-get update -q  # stale lists: refresh once and try again
        apt-get install -y -q --no-install-recommends "$@"
    fi
}

# What the tier runs besides the built binaries: etcd (and etcdctl for the etcd
# member steps), haproxy and keepalived (HA masters), openssl for the CA-hash pipeline and the kubelet stand-in's
# certificate request, and the tools kubeadm's preflight looks for (conntrack,
# socat, ethtool, iptables).
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v conntrack >/dev/null 2>&1 || [ -x /usr/sbin/conntrack ] || need+=(conntrack)
command -v socat >/dev/null 2>&1 || need+=(socat)
command -v ethtool >/dev/null 2>&1 || [ -x /usr/sbin/ethtool ] || need+=(ethtool)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || need+=(iptables)
# The complex (HA) flavour's load balancer and VIP on the masters; package installs
# start no service here (no systemd): the hosts' systemctl shim runs them.
[ -x /usr/sbin/haproxy ] || need+=(haproxy)
[ -x /usr/sbin/keepalived ] || need+=(keepalived)
command -v killall >/dev/null 2>&1 || need+=(psmisc) # keepalived's haproxy check
if [ "${#need[@]}" -gt 0 ]; then
    apt_install "${need[@]}"
    echo "k8s: installed ${need[*]} ($(elapsed))"
fi

mkdir -p "$HOME_DIR"
# Several worktrees/CI runs may set up at once: one builder at a time.
exec 9>"$HOME_DIR/build.lock"
flock 9

built_ok() {
    local tool out
    for tool in "${TOOLS[@]}"; do
        [ -x "$BIN/$tool" ] || return 1
        case "$tool" in
            kubectl) out="$("$BIN/$tool" version --client --short 2>/dev/null)" || return 1 ;;
            kubeadm) out="$("$BIN/$tool" version -o short 2>/dev/null)" || return 1 ;;
            *) out="$("$BIN/$tool" --version 2>/dev/null)" || return 1 ;;
        esac
        case "$out" in
            *"v$K8S_VERSION"*) ;;
            *) echo "k8s: $tool reports '$out', want v$K8S_VERSION" >&2; return 1 ;;
        esac
    done
}

if built_ok; then
    echo "k8s: kubernetes $K8S_VERSION binaries cached in $BIN ($(elapsed))"
    exit 0
fi

# Build tools: Debian's Go (1.19 in bookworm), the reflect2 replacement, dpkg-dev
# to unpack the source package.
need=()
command -v go >/dev/null 2>&1 || need+=(golang-go)
[ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ] || need+=(golang-github-modern-go-reflect2-dev)
command -v dpkg-source >/dev/null 2>&1 || need+=(dpkg-dev)
if [ "${#need[@]}" -gt 0 ]; then
    apt_install "${need[@]}"
    echo "k8s: installed ${need[*]} ($(elapsed))"
fi

rm -rf "$BIN" "$HOME_DIR/scratch"
SCRATCH="$HOME_DIR/scratch"
mkdir -p "$SCRATCH/apt/lists/partial" "$SCRATCH/src"
trap 'rm -rf "$SCRATCH"' EXIT

# deb-src entries derived from the machine's own Debian sources, in a private apt
# configuration: the machine's apt setup is left as it was.
src_list="$SCRATCH/apt/deb-src.sources"
: >"$src_list"
for f in /etc/apt/sources.list.d/*.sources; do
    [ -e "$f" ] || continue
    grep -qi 'debian' "$f" || continue
    # deb822: each stanza becomes a deb-src stanza (blank line between files).
    sed -e 's/^Types:.*/Types: deb-src/' "$f" >>"$src_list"
    echo >>"$src_list"
done
one_line="$SCRATCH/apt/deb-src.list"
: >"$one_line"
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -e "$f" ] || continue
    sed -n -e '/debian/s/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f" >>"$one_line"
done
mkdir -p "$SCRATCH/apt/parts"
cp "$src_list" "$SCRATCH/apt/parts/deb-src.sources"
APT_OPTS=(
    -o "Dir::Etc::SourceList=$one_line"
    -o "Dir::Etc::SourceParts=$SCRATCH/apt/parts"
    -o "Dir::State::Lists=$SCRATCH/apt/lists"
    -o "Dir::Cache::pkgcache=$SCRATCH/apt/pkgcache.bin"
    -o "Dir::Cache::srcpkgcache=$SCRATCH/apt/srcpkgcache.bin"
    -o "APT::Sandbox::User=root"
)
apt-get "${APT_OPTS[@]}" update -q >/dev/null
echo "k8s: deb-src lists fetched ($(elapsed))"
(cd "$SCRATCH/src" && apt-get "${APT_OPTS[@]}" source -q kubernetes >/dev/null)
# Debian's version is 1.20.5+really1.20.2-...: the 1.20.2 tree, whatever the prefix.
tree="$(find "$SCRATCH/src" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' -print -quit)"
if [ -z "$tree" ] || [ ! -f "$tree/go.mod" ]; then
    echo "k8s: no kubernetes source tree in $SCRATCH/src" >&2
    exit 1
fi
grep -q "gitVersion.*v$K8S_VERSION\|KUBE_GIT_VERSION.*$K8S_VERSION\|really$K8S_VERSION" "$tree/debian/changelog" "$tree/debian/rules" 2>/dev/null \
    || { echo "k8s: $tree is not Kubernetes $K8S_VERSION" >&2; exit 1; }
echo "k8s: source unpacked in $tree ($(elapsed))"

# The reflect2 fix (see the header).
vendored="$tree/vendor/github.com/modern-go/reflect2"
[ -d "$vendored" ] || { echo "k8s: $vendored not found" >&2; exit 1; }
rm -rf "$vendored"
mkdir -p "$vendored"
find /usr/share/gocode/src/github.com/modern-go/reflect2 -maxdepth 1 -type f -name '*.go' \
    ! -name '*_test.go' -exec cp {} "$vendored/" \;

# Version stamps, as Kubernetes' own build (hack/lib/version.sh) sets them.
# Kubernetes 1.20 builds in GOPATH mode (GO111MODULE=off, as hack/lib/golang.sh
# does): in module mode Go 1.19 refuses its go.mod ("updates to go.mod needed").
pkg_root=k8s.io/kubernetes/vendor/k8s.io
minor="${K8S_VERSION#*.}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for pkg in "$pkg_root/component-base/version" "$pkg_root/client-go/pkg/version"; do
    ldflags+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=${K8S_VERSION%%.*}"
    ldflags+=" -X $pkg.gitMinor=${minor%%.*} -X $pkg.gitTreeState=clean"
    ldflags+=" -X $pkg.gitCommit=debian-$K8S_VERSION -X $pkg.buildDate=$build_date"
done

mkdir -p "$SCRATCH/out" "$SCRATCH/gopath/src/k8s.io"
ln -s "$tree" "$SCRATCH/gopath/src/k8s.io/kubernetes"
export GOPROXY=off GOFLAGS='' CGO_ENABLED=0 GO111MODULE=off \
    GOCACHE="$SCRATCH/gocache" GOPATH="$SCRATCH/gopath" GOTOOLCHAIN=local
cd "$SCRATCH/gopath/src/k8s.io/kubernetes"

# The API server's OpenAPI definitions (pkg/generated/openapi) are generated at
# build time, not shipped: run openapi-gen as build/root/Makefile.generated_files
# does, over every package tagged +k8s:openapi-gen (staging seen as vendor/).
go build -o "$SCRATCH/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
openapi_dirs="$(
    set +o pipefail # grep -l exits 1 for a batch of files without the tag
    find -H . \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune -o -type f -name '*.go' -print |
        sed -e 's|^\./staging/src|vendor|' -e 's|^\./||' |
        xargs grep -l '^// *+k8s:' | xargs grep -l '+k8s:openapi-gen=' |
        grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' |
        xargs -n1 dirname | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd,
)"
[ -n "$openapi_dirs" ] || { echo "k8s: no package asks for OpenAPI definitions" >&2; exit 1; }
"$SCRATCH/openapi-gen" --logtostderr -i "$openapi_dirs" \
    -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
    -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt -r "$SCRATCH/openapi-violations.report"
[ -s pkg/generated/openapi/zz_generated.openapi.go ] || { echo "k8s: openapi-gen wrote nothing" >&2; exit 1; }
echo "k8s: OpenAPI definitions generated ($(elapsed))"

echo "k8s: building ${TOOLS[*]} (Go $(go env GOVERSION)); this takes minutes"
pkgs=()
for tool in "${TOOLS[@]}"; do pkgs+=("./cmd/$tool"); done
go build -trimpath -tags selinux,notest -ldflags "$ldflags" -o "$SCRATCH/out/" "${pkgs[@]}"
cd /
echo "k8s: built ($(elapsed))"

# Install atomically: the binaries appear only once all five are there.
mv "$SCRATCH/out" "$BIN"
if ! built_ok; then
    rm -rf "$BIN"
    echo "k8s: the built binaries do not report v$K8S_VERSION" >&2
    exit 1
fi
echo "k8s: kubernetes $K8S_VERSION binaries in $BIN ($(du -sh "$BIN" | cut -f1), $(elapsed))"
