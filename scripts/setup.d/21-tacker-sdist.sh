#!/usr/bin/env bash
# Tacker 16.0.0's source distribution, for its own Kubernetes management drivers.
#
# The drivers we replace (samples/mgmt_driver/kubernetes/: the v1 class and the v2
# script sol_v2_kubernetes_vnf_package/contents/Scripts/kubernetes_mgmt_v2.py, with
# its create_admin_token.yaml) ship only in the sdist, not in the wheel the
# Tacker venv holds. The `k8s` tier's tests/k8s/test_tacker_driver.py runs them
# unchanged from here (tests/testbed/tacker_driver.py).
#
# Idempotent: a finished download is kept (~19 MB) and checked in well under a
# second; an interrupted one leaves no file and is redone. Runs after
# 20-tacker.sh: it uses that venv's pip.
set -euo pipefail

TACKER_VERSION=16.0.0
CACHE_ROOT="${LCCN_TACKER_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/lccn-subscriber/tacker-$TACKER_VERSION}"
SDIST_DIR="$CACHE_ROOT/sdist"
SDIST="$SDIST_DIR/tacker-$TACKER_VERSION.tar.gz"
K2="tacker-$TACKER_VERSION/samples/mgmt_driver/kubernetes/sol_v2_kubernetes_vnf_package/contents/Scripts/kubernetes_mgmt_v2.py"

mkdir -p "$SDIST_DIR"
exec 9>"$SDIST_DIR/download.lock"
flock 9

if [ -f "$SDIST" ] && tar -tzf "$SDIST" "$K2" >/dev/null 2>&1; then
    echo "tacker $TACKER_VERSION sdist already in $SDIST_DIR"
    exit 0
fi

start=$(date +%s)
tmp="$(mktemp -d "$SDIST_DIR/tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
"$CACHE_ROOT/venv/bin/python" -m pip download -q --disable-pip-version-check \
    --no-deps --no-binary :all: "tacker==$TACKER_VERSION" -d "$tmp"
tar -tzf "$tmp/tacker-$TACKER_VERSION.tar.gz" "$K2" >/dev/null
mv "$tmp/tacker-$TACKER_VERSION.tar.gz" "$SDIST"
echo "tacker $TACKER_VERSION sdist in $SDIST_DIR in $(( $(date +%s) - start )) s"
