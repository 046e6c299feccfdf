#!/usr/bin/env bash
# install_k8s_cluster.sh: make this VM a Kubernetes node with kubeadm.
#
# lccn-subscriber's own node-side script, with the command-line contract of
# Tacker's sample (reference/TACKER.md §1.5), so the same parameters work:
#
#   -m ip1,ip2,...  masters (first = main master); a comma means HA
#   -w ip           this VM is a worker with that NIC address
#   -i ip           cluster IP (single: the master's NIC IP; HA: the VIP)
#   -a cidr         service CIDR (default 10.96.0.0/12)
#   -p cidr         pod CIDR (default 192.168.0.0/16)
#   -t token        bootstrap token          (joins; or LCCN_JOIN_TOKEN, kept off argv)
#   -s hash         CA public-key sha256 hex (joins)
#   -k key          certificate key          (control-plane joins; or LCCN_CERTIFICATE_KEY)
#
# Environment:
#   ha_flag            True/False: whether workers join the HA endpoint (VIP:16443)
#   http_proxy, https_proxy, no_proxy   passed to apt, containerd and kubeadm
#   K8S_VERSION        kubeadm/kubelet/kubectl version (default 1.26.8)
#   K8S_CNI            cilium (default) | calico | none
#   CILIUM_CLI_VERSION the cilium CLI release installed (pinned; default v0.15.19)
#   CILIUM_CLI_SHA256  its tarball's sha256; default: the release's own .sha256sum
#                      file (either way a mismatch fails before anything is unpacked)
#   CILIUM_CLI_URL     where releases are (default the cilium-cli GitHub releases)
#   K8S_SKIP_PHASES    comma list of phases to skip, e.g. "packages,cni" where
#                      the tools are already there (lccn's test hosts)
#   K8S_KUBEADM_EXTRA  extra arguments for kubeadm init/join
#   K8S_APISERVER_CERT_EXTRA_SANS  comma list of extra SANs of the API server's
#                      certificate (kubeadm init; the masters that join later take
#                      them from the cluster's kubeadm-config): lccn-subscriber sets
#                      the cluster_fip_name floating IP here
#   K8S_NODE_NAME      node name (default: the hostname)
#
# Phases, in order: packages (apt, containerd, kubeadm), ha (haproxy on 16443 +
# keepalived VIP; HA masters only), kubeadm (init on the main master, join
# elsewhere; skipped when this node already joined), kubeconfig (masters),
# cni (main master), report (main master: the lines the caller parses), done
# (/tmp/installed). Output lines the caller parses (main master only):
#   token:<token>
#   server:https://<endpoint>
#   -----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----   (the cluster CA)
#   ssl_ca_cert_hash:<sha256 hex>
#   certificate_key:<key>
# Any failure exits 255.

set -Eeuo pipefail

readonly HA_PORT=16443
readonly API_PORT=6443

MASTER_IPS=""
WORKER_IP=""
CLUSTER_IP=""
SERVICE_CIDR="10.96.0.0/12"
POD_CIDR="192.168.0.0/16"
TOKEN=""
CA_HASH=""
CERT_KEY=""
K8S_VERSION="${K8S_VERSION:-1.26.8}"
K8S_CNI="${K8S_CNI:-cilium}"
K8S_SKIP_PHASES="${K8S_SKIP_PHASES:-}"
K8S_KUBEADM_EXTRA="${K8S_KUBEADM_EXTRA:-}"
K8S_APISERVER_CERT_EXTRA_SANS="${K8S_APISERVER_CERT_EXTRA_SANS:-}"
CILIUM_VERSION="${CILIUM_VERSION:-1.14.5}"
CILIUM_CLI_VERSION="${CILIUM_CLI_VERSION:-v0.15.19}"
CILIUM_CLI_SHA256="${CILIUM_CLI_SHA256:-}"
CILIUM_CLI_URL="${CILIUM_CLI_URL:-https://github.com/cilium/cilium-cli/releases/download}"
CALICO_MANIFEST="${CALICO_MANIFEST:-https://raw.githubusercontent.com/projectcalico/calico/v3.26.1/manifests/calico.yaml}"
ha_flag="${ha_flag:-False}"

log() { echo "[install_k8s_cluster] $*" >&2; }
die() {
    log "error: $*"
    exit 255
}
trap 'die "line ${LINENO}: \"${BASH_COMMAND}\" failed"' ERR

usage() {
    sed -n '4,14p' "$0" >&2
    exit 255
}

while getopts "m:w:i:a:p:t:s:k:h" opt; do
    case "$opt" in
    m) MASTER_IPS="$OPTARG" ;;
    w) WORKER_IP="$OPTARG" ;;
    i) CLUSTER_IP="$OPTARG" ;;
    a) SERVICE_CIDR="$OPTARG" ;;
    p) POD_CIDR="$OPTARG" ;;
    t) TOKEN="$OPTARG" ;;
    s) CA_HASH="${OPTARG#sha256:}" ;;
    k) CERT_KEY="$OPTARG" ;;
    *) usage ;;
    esac
done

# The secrets may come in the environment (lccn-subscriber sends them so: any user
# of the node sees command lines in ps); -t and -k still work, as in Tacker's script.
TOKEN="${TOKEN:-${LCCN_JOIN_TOKEN:-}}"
CERT_KEY="${CERT_KEY:-${LCCN_CERTIFICATE_KEY:-}}"
unset LCCN_JOIN_TOKEN LCCN_CERTIFICATE_KEY

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

is_true() {
    case "${1,,}" in
    true | 1 | yes) return 0 ;;
    *) return 1 ;;
    esac
}

skipped() {
    case ",${K8S_SKIP_PHASES}," in
    *",$1,"*) return 0 ;;
    *) return 1 ;;
    esac
}

phase() {
    local name="$1"
    shift
    if skipped "$name"; then
        log "phase ${name}: skipped"
        return 0
    fi
    log "phase ${name}"
    "$@"
}

# Whether systemctl can start services here: systemd runs (sd_booted(3)), or the
# systemctl on PATH says it runs services (is-system-running answers "offline" where
# systemd is not PID 1: a systemctl binary alone, as in a container, starts nothing).
systemd_running() {
    command -v systemctl >/dev/null || return 1
    [ -d /run/systemd/system ] && return 0
    case "$(systemctl is-system-running 2>/dev/null || true)" in
    "" | offline | unknown) return 1 ;;
    *) return 0 ;;
    esac
}

local_addresses() {
    ip -o -4 addr show | awk '{split($4, a, "/"); print a[1]}'
}

# ---------------------------------------------------------------- roles

ROLE=""
MY_IP=""
MY_INDEX=0
HA=false
declare -a MASTERS=()
if [ -n "$MASTER_IPS" ] && [ -n "$WORKER_IP" ]; then
    die "give either -m (master) or -w (worker), not both"
elif [ -n "$MASTER_IPS" ]; then
    IFS=',' read -r -a MASTERS <<<"$MASTER_IPS"
    [ "${#MASTERS[@]}" -gt 1 ] && HA=true
    mine="$(local_addresses)"
    for i in "${!MASTERS[@]}"; do
        if grep -qxF "${MASTERS[$i]}" <<<"$mine"; then
            MY_IP="${MASTERS[$i]}"
            MY_INDEX=$i
        fi
    done
    [ -n "$MY_IP" ] || die "none of the masters (${MASTER_IPS}) is an address of this host"
    if [ "$MY_INDEX" -eq 0 ]; then ROLE=main-master; else ROLE=master; fi
elif [ -n "$WORKER_IP" ]; then
    ROLE=worker
    MY_IP="$WORKER_IP"
    is_true "$ha_flag" && HA=true
else
    usage
fi
[ -n "$CLUSTER_IP" ] || CLUSTER_IP="${MASTERS[0]:-}"
[ -n "$CLUSTER_IP" ] || die "-i cluster IP is required for a worker"

if $HA; then
    ENDPOINT="${CLUSTER_IP}:${HA_PORT}"
elif [ "$ROLE" = worker ]; then
    ENDPOINT="${CLUSTER_IP}:${API_PORT}"
else
    ENDPOINT="${MASTERS[0]}:${API_PORT}"
fi
NODE_NAME="${K8S_NODE_NAME:-$(hostname)}"
log "role ${ROLE}, address ${MY_IP}, endpoint ${ENDPOINT}, node ${NODE_NAME}, ha ${HA}"

if [ "$ROLE" != main-master ]; then
    if [ -z "$TOKEN" ] || [ -z "$CA_HASH" ]; then
        die "joining needs -t token and -s CA hash"
    fi
fi
if [ "$ROLE" = master ]; then
    [ -n "$CERT_KEY" ] || die "a control-plane join needs -k certificate key"
fi

# ---------------------------------------------------------------- phases

install_packages() {
    local apt_env=(env DEBIAN_FRONTEND=noninteractive)
    [ -n "${http_proxy:-}" ] && apt_env+=("http_proxy=${http_proxy}")
    [ -n "${https_proxy:-}" ] && apt_env+=("https_proxy=${https_proxy}")
    $SUDO swapoff -a
    $SUDO sed -i '/\sswap\s/ s/^#*/#/' /etc/fstab
    printf 'overlay\nbr_netfilter\n' | $SUDO tee /etc/modules-load.d/k8s.conf >/dev/null
    $SUDO modprobe overlay
    $SUDO modprobe br_netfilter
    printf '%s\n' 'net.bridge.bridge-nf-call-iptables = 1' \
        'net.bridge.bridge-nf-call-ip6tables = 1' 'net.ipv4.ip_forward = 1' |
        $SUDO tee /etc/sysctl.d/k8s.conf >/dev/null
    $SUDO sysctl --system >/dev/null

    local minor="${K8S_VERSION%.*}"
    $SUDO "${apt_env[@]}" apt-get update -q
    $SUDO "${apt_env[@]}" apt-get install -y -q apt-transport-https ca-certificates curl gpg \
        containerd
    $SUDO mkdir -p /etc/apt/keyrings /etc/containerd
    curl -fsSL "https://pkgs.k8s.io/core:/stable:/v${minor}/deb/Release.key" |
        $SUDO gpg --batch --yes --dearmor -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
    echo "deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] https://pkgs.k8s.io/core:/stable:/v${minor}/deb/ /" |
        $SUDO tee /etc/apt/sources.list.d/kubernetes.list >/dev/null
    $SUDO "${apt_env[@]}" apt-get update -q
    local pkgs=("kubelet=${K8S_VERSION}-*" "kubeadm=${K8S_VERSION}-*" "kubectl=${K8S_VERSION}-*")
    if $HA && [ "$ROLE" != worker ]; then
        pkgs+=(haproxy keepalived)
    fi
    $SUDO "${apt_env[@]}" apt-get install -y -q --allow-downgrades "${pkgs[@]}"
    $SUDO apt-mark hold kubelet kubeadm kubectl

    containerd config default | sed 's/SystemdCgroup = false/SystemdCgroup = true/' |
        $SUDO tee /etc/containerd/config.toml >/dev/null
    # lccn-subscriber writes this drop-in itself before (configure-proxy, mode 600 when
    # the URLs carry a password); run alone, the script writes it from the environment.
    local dropin=/etc/systemd/system/containerd.service.d/http-proxy.conf
    if [ -n "${http_proxy:-}${https_proxy:-}" ] && ! $SUDO test -e "$dropin"; then
        $SUDO mkdir -p "$(dirname "$dropin")"
        printf '[Service]\nEnvironment="HTTP_PROXY=%s" "HTTPS_PROXY=%s" "NO_PROXY=%s"\n' \
            "${http_proxy:-}" "${https_proxy:-}" "${no_proxy:-}" |
            $SUDO install -m 600 /dev/stdin "$dropin"
    fi
    $SUDO systemctl daemon-reload
    $SUDO systemctl restart containerd
    $SUDO systemctl enable --now kubelet
}

configure_ha() {
    local iface i
    iface="$(ip -o -4 addr show | awk -v ip="$MY_IP" '{split($4, a, "/"); if (a[1] == ip) print $2}')"
    [ -n "$iface" ] || die "no interface holds ${MY_IP}"
    {
        printf '%s\n' "global" "    log /dev/log local0" "    maxconn 4000" "    daemon" \
            "defaults" "    mode tcp" "    timeout connect 5s" "    timeout client 1h" \
            "    timeout server 1h" "listen stats" "    bind *:1080" "    mode http" \
            "    stats enable" "    stats uri /stats" \
            "frontend kubernetes-apiserver" "    bind *:${HA_PORT}" \
            "    default_backend kubernetes-apiserver" "backend kubernetes-apiserver" \
            "    balance roundrobin" "    option tcp-check"
        for i in "${!MASTERS[@]}"; do
            printf '    server  master%s %s:%s check\n' "${MASTERS[$i]##*.}" "${MASTERS[$i]}" "$API_PORT"
        done
    } | $SUDO tee /etc/haproxy/haproxy.cfg >/dev/null
    {
        printf '%s\n' "vrrp_script chk_haproxy {" "    script \"killall -0 haproxy\"" \
            "    interval 2" "    weight 2" "}" "vrrp_instance VRRP1 {"
        if [ "$MY_INDEX" -eq 0 ]; then echo "    state MASTER"; else echo "    state BACKUP"; fi
        printf '%s\n' "    interface ${iface}" "    virtual_router_id 51" \
            "    priority $((103 - MY_INDEX))" "    advert_int 1" \
            "    virtual_ipaddress {" "        ${CLUSTER_IP}/24" "    }" \
            "    track_script {" "        chk_haproxy" "    }" "}"
    } | $SUDO tee /etc/keepalived/keepalived.conf >/dev/null
    if systemd_running && command -v haproxy >/dev/null && command -v keepalived >/dev/null; then
        $SUDO systemctl enable haproxy keepalived
        $SUDO systemctl restart haproxy keepalived
    else
        log "haproxy/keepalived not run by systemd here: configuration written, services not started"
    fi
}

already_joined() {
    $SUDO test -e /etc/kubernetes/kubelet.conf
}

# A JoinConfiguration in a private file: kubeadm gets the token and the certificate
# key from it, never on its command line. Prints the file's path; the caller removes it.
join_config() {
    local api dir
    api="$($SUDO kubeadm config print join-defaults 2>/dev/null |
        awk '$1 == "apiVersion:" && $2 ~ /^kubeadm/ {print $2; exit}')"
    [ -n "$api" ] || die "kubeadm config print join-defaults printed no kubeadm apiVersion"
    dir="$(mktemp -d)"
    chmod 700 "$dir"
    {
        printf 'apiVersion: %s\nkind: JoinConfiguration\n' "$api"
        printf 'discovery:\n  bootstrapToken:\n    apiServerEndpoint: "%s"\n' "$ENDPOINT"
        printf '    token: "%s"\n    caCertHashes:\n    - "sha256:%s"\n' "$TOKEN" "$CA_HASH"
        printf 'nodeRegistration:\n  name: "%s"\n' "$NODE_NAME"
        if [ "$ROLE" = master ]; then
            printf 'controlPlane:\n  localAPIEndpoint:\n    advertiseAddress: "%s"\n' "$MY_IP"
            printf '  certificateKey: "%s"\n' "$CERT_KEY"
        fi
    } >"$dir/join.yaml"
    chmod 600 "$dir/join.yaml"
    echo "$dir/join.yaml"
}

kubeadm_init_or_join() {
    local extra=()
    # shellcheck disable=SC2206 # word splitting of the extra arguments is intended
    [ -n "$K8S_KUBEADM_EXTRA" ] && extra=($K8S_KUBEADM_EXTRA)
    if already_joined; then
        log "this node already belongs to a cluster (/etc/kubernetes/kubelet.conf): not joining again"
        return 0
    fi
    case "$ROLE" in
    main-master)
        local sans=()
        [ -n "$K8S_APISERVER_CERT_EXTRA_SANS" ] &&
            sans=(--apiserver-cert-extra-sans "$K8S_APISERVER_CERT_EXTRA_SANS")
        $SUDO kubeadm init --kubernetes-version "v${K8S_VERSION}" \
            --pod-network-cidr "$POD_CIDR" --service-cidr "$SERVICE_CIDR" \
            --control-plane-endpoint "$ENDPOINT" --apiserver-advertise-address "$MY_IP" \
            --node-name "$NODE_NAME" --upload-certs "${sans[@]}" "${extra[@]}" >&2
        ;;
    master | worker)
        local config
        config="$(join_config)"
        # shellcheck disable=SC2064 # the path is fixed now
        trap "rm -rf '$(dirname "$config")'" EXIT
        $SUDO kubeadm join --config "$config" "${extra[@]}" >&2
        rm -rf "$(dirname "$config")"
        ;;
    esac
}

install_kubeconfig() {
    mkdir -p "$HOME/.kube"
    $SUDO cp -f /etc/kubernetes/admin.conf "$HOME/.kube/config"
    $SUDO chown "$(id -u):$(id -g)" "$HOME/.kube/config"
}

# The cilium CLI of a pinned release, checked against a sha256 before it is
# unpacked (as root, into /usr/local/bin): CILIUM_CLI_SHA256 when given, else
# the checksum file the release publishes beside the tarball.
install_cilium_cli() {
    local tmp url want got
    tmp="$(mktemp -d)"
    url="${CILIUM_CLI_URL}/${CILIUM_CLI_VERSION}/cilium-linux-amd64.tar.gz"
    curl -fsSL -o "$tmp/cilium.tgz" "$url"
    want="$CILIUM_CLI_SHA256"
    if [ -z "$want" ]; then
        want="$(curl -fsSL "${url}.sha256sum" | awk '{print $1; exit}')"
    fi
    got="$(sha256sum "$tmp/cilium.tgz" | awk '{print $1}')"
    if [ -z "$want" ] || [ "$got" != "$want" ]; then
        rm -rf "$tmp"
        die "cilium CLI ${CILIUM_CLI_VERSION}: sha256 ${got} is not the expected ${want:-(none)}"
    fi
    $SUDO tar -xzf "$tmp/cilium.tgz" -C /usr/local/bin cilium
    rm -rf "$tmp"
    log "cilium CLI ${CILIUM_CLI_VERSION} installed (sha256 ${got})"
}

install_cni() {
    case "$K8S_CNI" in
    none) log "no CNI requested" ;;
    calico) kubectl apply -f "$CALICO_MANIFEST" >&2 ;;
    cilium)
        if ! command -v cilium >/dev/null; then
            install_cilium_cli
        fi
        cilium install --version "$CILIUM_VERSION" >&2
        cilium status --wait >&2
        ;;
    *) die "unknown K8S_CNI ${K8S_CNI}" ;;
    esac
}

ca_cert_hash() {
    openssl x509 -pubkey -noout -in /etc/kubernetes/pki/ca.crt |
        openssl pkey -pubin -outform der 2>/dev/null |
        openssl dgst -sha256 -hex | sed 's/^.* //'
}

# Upload the control-plane certificates again; prints their new key. Without a
# configuration kubeadm takes this node's address from the default route and
# fails on a host that has none ("cannot use 0.0.0.0 as the bind address for the
# API Server"); the version keeps it from asking dl.k8s.io for "stable-1".
upload_certs() {
    local api config
    api="$($SUDO kubeadm config print init-defaults 2>/dev/null |
        awk '$1 == "apiVersion:" && $2 ~ /^kubeadm/ {print $2; exit}')"
    [ -n "$api" ] || die "kubeadm config print init-defaults printed no kubeadm apiVersion"
    config="$(mktemp)"
    printf '%s\n' "apiVersion: ${api}" "kind: InitConfiguration" "localAPIEndpoint:" \
        "  advertiseAddress: ${MY_IP}" "---" "apiVersion: ${api}" \
        "kind: ClusterConfiguration" "kubernetesVersion: v${K8S_VERSION}" >"$config"
    $SUDO kubeadm init phase upload-certs --upload-certs --config "$config" | tail -n 1
    rm -f "$config"
}

report() {
    local token server hash key
    token="$($SUDO kubeadm token create)"
    server="$(kubectl cluster-info | sed 's/\x1b\[[0-9;]*m//g' |
        awk '/control plane/ {print $NF; exit}')"
    hash="$(ca_cert_hash)"
    key="$(upload_certs)"
    if [ -z "$token" ] || [ -z "$server" ] || [ -z "$hash" ] || [ -z "$key" ]; then
        die "could not read the cluster's join data"
    fi
    echo "token:${token}"
    echo "server:${server}"
    $SUDO cat /etc/kubernetes/pki/ca.crt
    echo "ssl_ca_cert_hash:${hash}"
    echo "certificate_key:${key}"
}

mark_done() {
    touch /tmp/installed
}

phase packages install_packages
if $HA && [ "$ROLE" != worker ]; then
    phase ha configure_ha
fi
phase kubeadm kubeadm_init_or_join
if [ "$ROLE" != worker ]; then
    phase kubeconfig install_kubeconfig
fi
if [ "$ROLE" = main-master ]; then
    phase cni install_cni
    phase report report
fi
phase "done" mark_done
log "done"
