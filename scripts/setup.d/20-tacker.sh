#!/usr/bin/env bash
# Install the real OpenStack Tacker 16.0.0 (for the `tacker` test tier and the demo)
# into a venv of its own, cached between runs on one machine.
#
# Idempotent: a finished install leaves a stamp file; a second run only checks it
# (well under a second). An interrupted install leaves no stamp and is redone.
# Tacker's own requirements are not pinned; only Tacker itself is, and the Kubernetes
# client below 37: from 37.0.0 its models are pydantic ones, and Tacker 16.0.0's v1
# Kubernetes infra driver builds them as `client.V1Deployment(local_vars_configuration=
# ...)` (tacker/vnfm/infra_drivers/kubernetes/k8s/translate_outputs.py,
# _gen_k8s_obj_from_name), which those reject: every v1 CNF INSTANTIATE fails ("Failed
# to init resource"). v2's driver passes plain dicts and works with either.
set -euo pipefail

TACKER_VERSION=16.0.0
CACHE_ROOT="${LCCN_TACKER_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/lccn-subscriber/tacker-$TACKER_VERSION}"
VENV="$CACHE_ROOT/venv"
STAMP="$CACHE_ROOT/installed.stamp"

mkdir -p "$CACHE_ROOT"
# Several worktrees/CI runs may set up at once: one installer at a time.
exec 9>"$CACHE_ROOT/install.lock"
flock 9

K8S_CLIENT="kubernetes<37"
k8s_client_ok() {
    "$VENV/bin/python" - <<'PY'
import importlib.metadata as m
import sys
sys.exit(int(m.version("kubernetes").split(".")[0]) >= 37)
PY
}

if [ -f "$STAMP" ] && [ -x "$VENV/bin/tacker-server" ]; then
    if ! k8s_client_ok; then  # an install from before the pin
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$K8S_CLIENT"
        echo "tacker $TACKER_VERSION: Kubernetes client now $K8S_CLIENT in $VENV"
    fi
    echo "tacker $TACKER_VERSION already installed in $VENV"
    exit 0
fi

start=$(date +%s)
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "tacker==$TACKER_VERSION" psycopg2-binary "$K8S_CLIENT"
"$VENV/bin/python" -c "import tacker, psycopg2" >/dev/null
echo "tacker $TACKER_VERSION installed in $VENV in $(( $(date +%s) - start )) s"
date -u +%FT%TZ >"$STAMP"
