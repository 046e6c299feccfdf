#!/usr/bin/env bash
# install_helm.sh: the sample package's helm_installation_script_path
# ("Scripts/install_helm.sh" in k8s_cluster_installation_param).
#
# lccn-subscriber reads it from this package in Tacker and runs it as root on every
# master once the cluster is up, with in its environment:
#   KUBECONFIG                          the admin kubeconfig
#   http_proxy, https_proxy, no_proxy   the cluster's proxy, when the parameters give one
#   cluster.script_env                  as for install_k8s_cluster.sh
# A non-zero exit fails the operation's job; success is recorded on the master, so
# the script runs again only on a rebuilt master or when the package changes it.
#
# It installs a pinned Helm release (HELM_VERSION), checked against the sha256
# the release publishes beside the tarball (or HELM_SHA256), unless a helm is
# already there or K8S_SKIP_PHASES lists "packages" (hosts whose tools are
# preinstalled, as install_k8s_cluster.sh reads it).

set -Eeuo pipefail

HELM_VERSION="${HELM_VERSION:-v3.14.4}"
HELM_SHA256="${HELM_SHA256:-}"
HELM_URL="${HELM_URL:-https://get.helm.sh}"

log() { echo "[install_helm] $*" >&2; }

kubectl get nodes >/dev/null || {
    log "the cluster does not answer with KUBECONFIG=${KUBECONFIG:-}"
    exit 1
}

case ",${K8S_SKIP_PHASES:-}," in
*,packages,*)
    log "packages phase skipped here: Helm not downloaded"
    exit 0
    ;;
esac
if command -v helm >/dev/null; then
    log "helm already installed: $(helm version --short 2>/dev/null || echo unknown)"
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
tarball="helm-${HELM_VERSION}-linux-amd64.tar.gz"
curl -fsSL -o "$tmp/$tarball" "${HELM_URL}/${tarball}"
want="$HELM_SHA256"
if [ -z "$want" ]; then
    want="$(curl -fsSL "${HELM_URL}/${tarball}.sha256sum" | awk '{print $1; exit}')"
fi
got="$(sha256sum "$tmp/$tarball" | awk '{print $1}')"
if [ -z "$want" ] || [ "$got" != "$want" ]; then
    log "helm ${HELM_VERSION}: sha256 ${got} is not the expected ${want:-(none)}"
    exit 1
fi
tar -xzf "$tmp/$tarball" -C "$tmp"
install -m 755 "$tmp/linux-amd64/helm" /usr/local/bin/helm
log "helm ${HELM_VERSION} installed (sha256 ${got})"
