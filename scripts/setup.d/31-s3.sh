#!/usr/bin/env bash
# An S3-compatible object store for the Kafka broker's persistent storage in the
# chaos tier (Tansu keeps topics in S3 or in memory; only S3 outlives a broker
# killed with kill -9): moto's server, from PyPI, in a venv of its own outside
# the work tree. It supports the conditional PUTs Tansu coordinates with.
# Idempotent (stamp file; flock for parallel runs); prints where the server is.
set -euo pipefail

VERSION=5.2.5
CACHE="${LCCN_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lccn-subscriber}"
ROOT="$CACHE/moto-$VERSION"
STAMP="$ROOT/installed.stamp"

mkdir -p "$ROOT"
exec 9>"$ROOT/install.lock"
flock 9

if [ ! -f "$STAMP" ] || [ ! -x "$ROOT/venv/bin/moto_server" ]; then
    rm -rf "$ROOT/venv"
    python3 -m venv "$ROOT/venv"
    "$ROOT/venv/bin/python" -m pip install -q --disable-pip-version-check "moto[server]==$VERSION"
    "$ROOT/venv/bin/python" -c "import moto, flask" >/dev/null
    date -u +%FT%TZ >"$STAMP"
fi
echo "s3 store (moto server): $ROOT/venv/bin/moto_server"
