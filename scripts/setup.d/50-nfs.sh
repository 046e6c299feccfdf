#!/usr/bin/env bash
# The storage server tests' NFS: NFS-Ganesha (a user-space NFS server: the kernel's
# nfsd cannot serve from the test hosts' network namespaces) behind the test hosts'
# `exportfs` (tests/testbed/exportfs_ganesha.py), libnfs's user-space client
# (nfs-ls, nfs-cp: no kernel NFS client to mount with) to read and write the exports
# from the nodes, and nfs-common so that the nodes' NFS client counts as installed.
# Idempotent: does nothing when everything is already installed.
set -euo pipefail

need=()
command -v ganesha.nfsd >/dev/null 2>&1 || need+=(nfs-ganesha)
[ -e /usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so ] || ls /usr/lib/*/ganesha/libfsalvfs.so \
    >/dev/null 2>&1 || need+=(nfs-ganesha-vfs)
command -v nfs-cp >/dev/null 2>&1 || need+=(libnfs-utils)
[ -x /sbin/mount.nfs ] || [ -x /usr/sbin/mount.nfs ] || need+=(nfs-common)

if [ "${#need[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    exec 9>/tmp/lccn-setup-apt.lock
    flock 9
    if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]; then
        apt-get update -q
    fi
    if ! apt-get install -y -q --no-install-recommends "${need[@]}"; then
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${need[@]}"
    fi
fi
