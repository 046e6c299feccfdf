#!/usr/bin/env bash
# A real private registry for the private_registry_connection_info tests: Debian's
# docker-registry (the CNCF distribution registry) and apache2-utils' htpasswd (bcrypt
# entries for its basic auth). The tests run the registry themselves, inside a test
# host's network namespace; the package's own service is never started (policy-rc.d).
# Idempotent: does nothing when both are installed.
set -euo pipefail

need=()
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || need+=(apache2-utils)
[ "${#need[@]}" -eq 0 ] && exit 0

export DEBIAN_FRONTEND=noninteractive
# apt has its own lock; a second setup run waits for it.
exec 9>"${LCCN_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lccn-subscriber}/.registry.lock" 2>/dev/null ||
    exec 9>/tmp/.lccn-registry.lock
flock 9
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
    apt-get update -q
fi
if ! apt-get install -y -q --no-install-recommends "${need[@]}"; then
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${need[@]}"
fi
