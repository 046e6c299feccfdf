#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine, then run it.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -m "not tacker"`).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,otel]'

# Real parts of the integration tiers (sshd, Tacker, the Kafka-protocol broker ...):
# each script installs its part idempotently and caches it between runs.
for setup in scripts/setup.d/*.sh; do
    [ -e "$setup" ] || continue
    echo "== setup: $setup"
    bash "$setup"
done

exec .venv/bin/python -m pytest "$@"
