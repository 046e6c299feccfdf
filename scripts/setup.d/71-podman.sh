#!/usr/bin/env bash
# The `container` tests: podman (with runc: crun cannot start containers on these
# cgroups-v1 machines) and a base image made from Debian's packages, since no image
# registry is reachable: `localhost/debian-python:bookworm`, Debian bookworm's minbase
# with python3 and python3-venv (mmdebstrap, then `podman import`). The root file
# system is cached in ~/.cache/lccn-subscriber between runs.
# Idempotent: does nothing when podman is installed and the image exists.
set -euo pipefail

IMAGE=localhost/debian-python:bookworm
cache="${LCCN_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lccn-subscriber}"
mkdir -p "$cache"

have_tools() {
    command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 &&
        command -v mmdebstrap >/dev/null 2>&1
}
have_tools && podman image exists "$IMAGE" 2>/dev/null && exit 0

# apt and the image store have their own locks; a second setup run waits for ours.
exec 9>"$cache/.podman.lock"
flock 9

if ! have_tools; then
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
        apt-get update -q
    fi
    packages=(podman runc mmdebstrap)
    if ! apt-get install -y -q --no-install-recommends "${packages[@]}"; then
        # Stale lists (a package moved): refresh once and try again.
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${packages[@]}"
    fi
fi

if ! podman image exists "$IMAGE" 2>/dev/null; then
    tar="$cache/debian-python-bookworm.tar"
    if [ ! -s "$tar" ]; then
        # passwd: useradd, for the image's own user (python:3.11-slim has it too).
        # The output's format comes from its name's extension: .tar.
        part="$cache/debian-python-bookworm.part.tar"
        rm -rf "$part"
        mmdebstrap --variant=minbase --include=python3,python3-venv,passwd \
            bookworm "$part" http://deb.debian.org/debian
        mv "$part" "$tar"
    fi
    podman import "$tar" "$IMAGE"
fi
