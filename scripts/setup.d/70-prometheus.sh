#!/usr/bin/env bash
# The real Prometheus for the `prometheus` tests: Debian's package (2.42), which brings
# promtool (`check rules`, `test rules` on deploy/prometheus/). The tests run their own
# Prometheus on a free port with a temporary storage directory; the package's own
# service is never started (a policy-rc.d refuses it while the package installs).
# Idempotent: does nothing when both programs are installed.
set -euo pipefail

command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 && exit 0

export DEBIAN_FRONTEND=noninteractive
# apt has its own lock; a second setup run waits for ours, then finds it installed.
exec 9>"${LCCN_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lccn-subscriber}/.prometheus.lock" 2>/dev/null ||
    exec 9>/tmp/.lccn-prometheus.lock
flock 9
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 && exit 0

# No service start while installing: on a machine without one, a policy-rc.d of ours
# (exit 101: "action forbidden") for the duration of the install.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
    apt-get update -q
fi
# --no-install-recommends: not the node exporter it recommends.
if ! apt-get install -y -q --no-install-recommends prometheus; then
    # Stale lists (a package moved): refresh once and try again.
    apt-get update -q
    apt-get install -y -q --no-install-recommends prometheus
fi
