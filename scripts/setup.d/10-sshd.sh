#!/usr/bin/env bash
# Tools for the `ssh` test tier: a real sshd per test host (network namespaces), sudo,
# iproute2 for the namespaces and bridge, shellcheck for the node-side scripts.
# Idempotent: does nothing when everything is already installed.
set -euo pipefail

need=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
# sudo: the executor runs commands with sudo for non-root users (Tacker logs in as ubuntu).
command -v sudo >/dev/null 2>&1 || need+=(sudo)

if [ "${#need[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    # Update the package lists once (they are empty on a fresh machine).
    if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
        apt-get update -q
    fi
    packages=(openssh-server iproute2 shellcheck sudo)
    if ! apt-get install -y -q --no-install-recommends "${packages[@]}"; then
        # Stale lists (a package moved): refresh once and try again.
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${packages[@]}"
    fi
fi
# sshd refuses to start without its privilege-separation directory.
mkdir -p /run/sshd
