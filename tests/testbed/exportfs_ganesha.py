#!/usr/bin/python3
"""``exportfs`` for the sshd test hosts: the exports applied by a real NFS server,
NFS-Ganesha (user space, Debian's ``nfs-ganesha`` + ``nfs-ganesha-vfs``).

The kernel's NFS server cannot run in the test hosts (no ``nfsd`` in their network
namespaces, no kernel NFS client to mount with), so the storage server's
``exportfs -ra`` lands here: the lines of ``/etc/exports`` and
``/etc/exports.d/*.exports`` (``<dir> <client>(<options>)``, as ``nfs-kernel-server``
reads them) become one Ganesha ``EXPORT`` each (NFSv4 over TCP, path and pseudo path
the directory, ``rw``/``ro`` and ``all_squash``/``root_squash``/``no_root_squash``
kept), and Ganesha is (re)started in the host's namespaces on port 2049 with its
state in the host's private ``/tmp/lccn-ganesha``. ``exportfs`` without arguments
lists what is exported. Options other than those four are accepted and ignored
(``sync``, ``no_subtree_check``, ``insecure``: Ganesha's defaults behave so).

Not simulated: NFSv3, locking (NLM), rpcbind/``showmount``, Kerberos.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import signal
import socket
import subprocess
import sys
import time

STATE = "/tmp/lccn-ganesha"
CONF = f"{STATE}/ganesha.conf"
PIDFILE = f"{STATE}/ganesha.pid"
LOG = f"{STATE}/ganesha.log"
PORT = 2049


def exports() -> list[tuple[str, str, list[str]]]:
    lines: list[str] = []
    for path in ["/etc/exports", *sorted(glob.glob("/etc/exports.d/*.exports"))]:
        try:
            with open(path) as fh:
                lines += fh.read().splitlines()
        except FileNotFoundError:
            continue
    out = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        directory, *clients = line.split()
        for client in clients:
            match = re.fullmatch(r"([^()]*)(?:\(([^)]*)\))?", client)
            if match is None:
                raise SystemExit(f"exportfs: bad client {client!r} in: {line}")
            who = match.group(1) or "*"
            options = [o for o in (match.group(2) or "").split(",") if o]
            out.append((directory, who, options))
    return out


def config(entries: list[tuple[str, str, list[str]]]) -> str:
    parts = [
        f"NFS_CORE_PARAM {{\n  Protocols = 4;\n  NFS_Port = {PORT};\n  Enable_NLM = false;\n"
        "  Enable_RQUOTA = false;\n  Enable_UDP = false;\n}\n",
        f"NFSV4 {{\n  Graceless = true;\n  RecoveryRoot = {STATE}/recovery;\n}}\n",
    ]
    for index, (directory, who, options) in enumerate(entries, start=1):
        access = "RO" if "ro" in options else "RW"
        squash = "All_Squash" if "all_squash" in options else "Root_Squash"
        if "no_root_squash" in options:
            squash = "No_Root_Squash"
        clients = "*" if who in ("*", "") else who
        parts.append(
            "EXPORT {\n"
            f"  Export_Id = {index};\n  Path = {directory};\n  Pseudo = {directory};\n"
            "  Protocols = 4;\n  Transports = TCP;\n  SecType = sys;\n  Access_Type = None;\n"
            f"  Anonymous_Uid = 65534;\n  Anonymous_Gid = 65534;\n"
            f"  CLIENT {{\n    Clients = {clients};\n    Access_Type = {access};\n"
            f"    Squash = {squash};\n  }}\n"
            "  FSAL {\n    Name = VFS;\n  }\n}\n"
        )
    return "".join(parts)


def _netns(pid: int | str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return ""


def running() -> list[int]:
    """Ganesha processes in this host's network namespace."""
    mine = _netns("self")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as fh:
                comm = fh.read().strip()
        except OSError:
            continue
        if comm.startswith("ganesha.nfsd") and _netns(entry) == mine:
            found.append(int(entry))
    return found


def stop() -> None:
    pids = running()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in running():
        os.kill(pid, signal.SIGKILL)


def listening() -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        try:
            sock.connect(("127.0.0.1", PORT))
        except OSError:
            return False
    return True


def start() -> None:
    os.makedirs(f"{STATE}/recovery", exist_ok=True)
    subprocess.run(
        ["ganesha.nfsd", "-f", CONF, "-L", LOG, "-p", PIDFILE, "-N", "NIV_EVENT"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        timeout=30,
    )
    deadline = time.monotonic() + 30
    while not listening():
        if time.monotonic() > deadline:
            raise SystemExit(f"exportfs: NFS-Ganesha did not listen on {PORT} (see {LOG})")
        time.sleep(0.2)


def main(argv: list[str]) -> int:
    entries = exports()
    if not argv or argv == ["-v"]:
        for directory, who, options in entries:
            print(f"{directory}\t{who}({','.join(options)})" if argv else f"{directory}\t{who}")
        return 0
    flags = "".join(a.lstrip("-") for a in argv if a.startswith("-"))
    if "r" not in flags and "a" not in flags:
        sys.stderr.write("exportfs (test hosts): only -r, -a, -ra and -v are supported\n")
        return 2
    for directory, _, _ in entries:
        if not os.path.isdir(directory):
            sys.stderr.write(f"exportfs: Failed to stat {directory}: No such file or directory\n")
            return 1
    os.makedirs(STATE, exist_ok=True)
    with open(CONF, "w") as fh:
        fh.write(config(entries))
    stop()
    if entries:
        start()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
