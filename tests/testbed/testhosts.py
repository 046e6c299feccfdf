#!/usr/bin/env python3
"""Real sshd test hosts, each in its own network namespace (the ``ssh`` test tier).

Every host gets its own address, hostname and private ``/etc/kubernetes``,
``/root``, ``/var/lib/kubelet``, ``/var/lib/etcd``, ``/tmp``, ``/etc/hosts``,
``/etc/haproxy``, ``/etc/keepalived``, ``/etc/apt/apt.conf.d``,
``/etc/systemd/system`` and ``/var/lib/lccn-subscriber`` (bind mounts inside
``unshare --uts --mount --propagation private``), so a script that writes
``/tmp/installed`` or ``/etc/kubernetes/admin.conf`` on one host does not see
another host's files. The rest of ``/etc`` is an overlay on the machine's: what a
host writes there stays its own, and the password test user's ``passwd``,
``shadow``, ``group`` and ``sudoers`` sit in its upper layer (an overlay, not files
bound over the machine's, because those come undone when the machine's package
manager replaces the files). ``/usr/local/bin`` is replaced by one of two tool sets:

* ``kubernetes="standin"`` (the ``ssh`` tier): the stand-in ``kubeadm``/``kubectl``
  (``tests/testbed/k8s_standin.py``), which keep one shared cluster state for all
  hosts of a bed;
* ``kubernetes="real"`` (the ``k8s`` tier): the real ``kubeadm``, ``kubectl``,
  ``kube-apiserver``, ``kube-controller-manager`` and ``kube-scheduler`` built by
  ``scripts/setup.d/40-k8s.sh`` (etcd is Debian's, in /usr/bin), the kubelet
  stand-in as ``kubelet`` (``tests/testbed/kubelet_standin.py``) and a
  ``systemctl`` that starts and stops it, and Debian's haproxy and keepalived on
  the HA masters (``tests/testbed/systemctl_shim.sh``; there is no systemd).
  The hosts also get private ``/var/lib/cni``,
  ``/var/lib/dockershim``, ``/var/run/kubernetes`` and ``/etc/cni/net.d``, which
  ``kubeadm reset`` empties. The static pods (etcd, the API server ...), haproxy
  and keepalived run as processes inside the host's namespaces (keepalived's VRRP
  moves the VIP between the hosts on the bed's bridge); :func:`reset_cluster`,
  :func:`wipe_host` and :func:`destroy` stop them, the API server before etcd.

Network: one bridge per bed whose host end lives in the root namespace (so the
test process reaches the hosts, and 127.0.0.1 services stay where they are),
one veth pair per host. Addresses come from 10.77.0.0/24, used only inside the
namespaces created here; each bed reserves one /27 block of it (so up to 8 beds
run side by side): ``.1`` of the block is the bridge, hosts follow, the last
usable address is never assigned (a reachable-subnet, unused address for
"host down" tests).

Many hosts (``ports_per_address`` > 1, for ``bench/fleet.py``): several hosts share
one namespace and address, each its own sshd on its own port (22, then 2201,
2202 ...) with its own hostname and private directories (its own ``unshare``),
so a bed holds up to 27 addresses x ``ports_per_address`` hosts. ``clusters``
gives each host a stand-in cluster of its own number (``TestBed.group_dir``),
so several independent clusters share one bed.

Use from Python (``create()`` / ``destroy()``) or the command line::

    python3 -m tests.testbed.testhosts up --count 3 [--no-password] [--join-delay 0.5]
    python3 -m tests.testbed.testhosts up --count 3 --kubernetes real
    python3 -m tests.testbed.testhosts down RUN_DIR        # or: down --all

Needs root, iproute2, util-linux ``unshare`` and openssh-server
(``scripts/setup.d/10-sshd.sh``); the real mode also ``scripts/setup.d/40-k8s.sh``.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "BASE_ROOT",
    "TestBed",
    "TestHost",
    "admin_kubectl",
    "create",
    "destroy",
    "destroy_all",
    "inside",
    "k8s_bin_dir",
    "k8s_missing",
    "kubernetes_processes",
    "nodes_ready",
    "ready_nodes",
    "reset_cluster",
    "stop_kubernetes",
    "wipe_host",
]

SUBNET = ipaddress.ip_network("10.77.0.0/24")
BLOCK_PREFIX = 27
BASE_ROOT = Path("/run/lccn-testhosts")
HERE = Path(__file__).resolve().parent
STANDIN = HERE / "k8s_standin.py"
EXPORTFS = HERE / "exportfs_ganesha.py"  # exportfs backed by NFS-Ganesha (the storage server)
KUBELET_STANDIN = HERE / "kubelet_standin.py"
SYSTEMCTL_SHIM = HERE / "systemctl_shim.sh"
K8S_VERSION = "1.20.2"
# What install_k8s_cluster.sh needs on these hosts, through its environment (the
# handlers pass the same through ClusterSettings.script_env): the tools are there
# (no apt, no CNI), the version is the one built, and kubeadm's preflight (swap,
# container runtime, images, kernel modules ...) cannot pass without a VM.
SCRIPT_ENV = {
    "K8S_SKIP_PHASES": "packages,cni",
    "K8S_VERSION": K8S_VERSION,
    # The image pull that ends preflight needs a container runtime even when every
    # check's error is ignored: skip the phase (checks and pull) altogether.
    "K8S_KUBEADM_EXTRA": "--ignore-preflight-errors=all --skip-phases=preflight",
}
K8S_TOOLS = ("kubeadm", "kubectl", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# What the real mode's hosts run, in stop order: the API server before etcd.
K8S_PROCESSES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "haproxy",
    "keepalived",
    "etcd",
)
SSHD = "/usr/sbin/sshd"
TEST_USER = "lccntest"
TEST_UID = 61917
# The sshd processes this process started, reaped on destroy() (pid -> Popen).
_PROCS: dict[int, subprocess.Popen[bytes]] = {}
# Directories each host gets privately (bind mounts over the real ones).
PRIVATE_DIRS = (
    "/etc/kubernetes",
    "/root",
    "/var/lib/kubelet",
    "/var/lib/etcd",
    "/etc/containerd",  # the private registries' certs.d (and config.toml)
    "/tmp",
    "/etc/haproxy",
    "/etc/keepalived",
    # the proxy files (apt, containerd's drop-in) and the Helm script's marker
    "/etc/apt/apt.conf.d",
    "/etc/systemd/system",
    "/var/lib/lccn-subscriber",
    # the storage server: its volume's mount point (/srv/...) and its exports
    "/srv",
    "/etc/exports.d",
)
# Also private in the real mode: kubeadm reset empties them.
REAL_PRIVATE_DIRS = ("/var/lib/cni", "/var/lib/dockershim", "/var/run/kubernetes", "/etc/cni/net.d")
KubernetesMode = Literal["standin", "real"]


def k8s_bin_dir() -> Path:
    """Where ``scripts/setup.d/40-k8s.sh`` puts the built Kubernetes binaries."""
    cache = os.environ.get("LCCN_TEST_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lccn-subscriber"
    )
    return Path(cache) / f"kubernetes-{K8S_VERSION}" / "bin"


def k8s_missing() -> str | None:
    """Why the real mode cannot run here (a sentence), or ``None`` when it can."""
    bin_dir = k8s_bin_dir()
    missing = [tool for tool in K8S_TOOLS if not os.access(bin_dir / tool, os.X_OK)]
    if missing:
        return (
            f"Kubernetes {K8S_VERSION} binaries missing in {bin_dir} ({', '.join(missing)}): "
            "run `bash scripts/setup.d/40-k8s.sh`"
        )
    if shutil.which("etcd") is None or shutil.which("openssl") is None:
        return "etcd or openssl missing: run `bash scripts/setup.d/40-k8s.sh`"
    return None


@dataclass(frozen=True)
class TestHost:
    """One sshd host: ``name`` is its hostname, ``address`` its IPv4 address."""

    __test__ = False  # not a pytest test class, whatever its name

    name: str
    address: str
    namespace: str
    port: int = 22
    host_key: str = ""  # "ssh-ed25519 AAAA..." (public)
    pid: int = 0
    cluster: int | None = None  # its stand-in cluster (TestBed.group_dir), None: the bed's

    @property
    def known_hosts_name(self) -> str:
        """How known_hosts names the host: the address, ``[address]:port`` off port 22."""
        return self.address if self.port == 22 else f"[{self.address}]:{self.port}"


@dataclass
class TestBed:
    """A set of hosts sharing one bridge, client key and stand-in cluster state.

    Attributes:
        run_id: unique per bed; part of every namespace and link name.
        root: the bed's directory (keys, configs, per-host dirs, cluster state).
        client_key: private key (ed25519, no passphrase) authorised for root and
            the test user on every host.
        known_hosts: a known_hosts file listing every host's key.
        user, password: the password-auth test user (``None`` when disabled).
        unused_address: an address of the bed's block that no host answers on.
        cluster_dir: where the stand-ins keep ``state.json`` and ``calls.jsonl``.
        kubernetes: ``standin`` (stand-in kubeadm/kubectl) or ``real`` (see the module).
    """

    __test__ = False  # not a pytest test class, whatever its name

    run_id: str
    root: Path
    bridge: str
    bridge_address: str
    block: int
    client_key: Path
    known_hosts: Path
    unused_address: str
    cluster_dir: Path
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    hosts: list[TestHost] = field(default_factory=list)
    kubernetes: KubernetesMode = "standin"

    def ssh_section(self, **settings: float) -> dict[str, Any]:
        """The ``ssh`` section of a ``serve`` that reaches these hosts, with ``settings``."""
        return {
            "known_hosts": str(self.known_hosts),
            "client_keys": [str(self.client_key)],
            "key_dir": str(self.client_key.parent),
            "connect_timeout": 5.0,
            **settings,
        }

    def private_dir(self, host: TestHost, target: str) -> Path:
        """The directory the host sees as ``target`` (e.g. ``/etc/kubernetes``)."""
        return self.root / "hosts" / host.name / "fs" / target.strip("/").replace("/", "-")

    @property
    def calls_log(self) -> Path:
        return self.cluster_dir / "calls.jsonl"

    @property
    def cluster_state(self) -> Path:
        return self.cluster_dir / "state.json"

    def set_join_delay(self, seconds: float) -> None:
        """Make every stand-in ``kubeadm join`` take ``seconds`` (the benchmark's cost)."""
        for directory in (self.cluster_dir, *self.group_dirs()):
            (directory / "join_delay").write_text(f"{seconds}\n")

    def group_dir(self, cluster: int) -> Path:
        """Where the stand-ins of the hosts of cluster number ``cluster`` keep their state."""
        return self.root / "clusters" / str(cluster)

    def group_dirs(self) -> list[Path]:
        numbers = sorted({h.cluster for h in self.hosts if h.cluster is not None})
        return [self.group_dir(n) for n in numbers]

    def group_state(self, cluster: int) -> dict[str, object]:
        """The stand-in state of cluster number ``cluster`` (empty before its init)."""
        path = self.group_dir(cluster) / "state.json"
        if not path.exists():
            return {}
        data: dict[str, object] = json.loads(path.read_text() or "{}")
        return data

    def host(self, name: str) -> TestHost:
        for item in self.hosts:
            if item.name == name:
                return item
        raise KeyError(name)

    def calls(self) -> list[dict[str, object]]:
        """Every recorded stand-in call, oldest first."""
        if not self.calls_log.exists():
            return []
        return [json.loads(line) for line in self.calls_log.read_text().splitlines() if line]

    def state(self) -> dict[str, object]:
        """The stand-in cluster state (empty before ``kubeadm init``)."""
        if not self.cluster_state.exists():
            return {}
        data: dict[str, object] = json.loads(self.cluster_state.read_text() or "{}")
        return data

    def to_json(self) -> str:
        data = asdict(self)
        data["root"] = str(self.root)
        data["client_key"] = str(self.client_key)
        data["known_hosts"] = str(self.known_hosts)
        data["cluster_dir"] = str(self.cluster_dir)
        data.pop("password")
        return json.dumps(data, indent=2)


def _run(*argv: str, check: bool = True, input_text: str | None = None) -> str:
    proc = subprocess.run(
        argv, input=input_text, capture_output=True, text=True, check=False, timeout=60
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _reserve_block(run_id: str) -> int:
    """Take a free /27 of 10.77.0.0/24 (an atomic mkdir); reclaim ones of dead owners."""
    blocks = BASE_ROOT / "blocks"
    blocks.mkdir(parents=True, exist_ok=True)
    count = 2 ** (BLOCK_PREFIX - SUBNET.prefixlen)
    for attempt in range(2):
        for block in range(count):
            path = blocks / str(block)
            try:
                path.mkdir()
            except FileExistsError:
                if attempt == 1 and _block_is_stale(path):
                    _reclaim(path)
                    with contextlib.suppress(FileExistsError):
                        path.mkdir()
                        (path / "owner").write_text(run_id)
                        return block
                continue
            (path / "owner").write_text(run_id)
            return block
    raise RuntimeError("no free /27 block in 10.77.0.0/24: too many test beds running")


def _block_is_stale(path: Path) -> bool:
    try:
        owner = (path / "owner").read_text().strip()
    except OSError:
        # No owner yet: taken a moment ago (mkdir, then the owner file), unless long ago.
        try:
            return time.time() - path.stat().st_mtime > 60
        except OSError:
            return False
    # Alive while its creator runs or any of its sshd do (`up` from the CLI exits).
    pids: list[int] = []
    with contextlib.suppress(OSError, ValueError):
        pids.append(int((BASE_ROOT / owner / "owner.pid").read_text()))
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        meta = json.loads((BASE_ROOT / owner / "bed.json").read_text())
        pids += [int(host["pid"]) for host in meta["hosts"]]
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            return False
        return False
    return True


def _reclaim(block_path: Path) -> None:
    """Remove what a dead owner left behind, then free its block."""
    with contextlib.suppress(OSError):
        owner = (block_path / "owner").read_text().strip()
        meta = BASE_ROOT / owner / "bed.json"
        if meta.exists():
            _destroy_from_meta(json.loads(meta.read_text()))
    shutil.rmtree(block_path, ignore_errors=True)


def _addresses(block: int, count: int) -> tuple[str, list[str], str]:
    size = 2 ** (32 - BLOCK_PREFIX)
    base = int(SUBNET.network_address) + block * size
    usable = size - 2  # minus network and broadcast
    if count > usable - 2:  # minus bridge and the reserved unused address
        raise ValueError(f"at most {usable - 2} hosts per bed, asked for {count}")
    bridge = str(ipaddress.ip_address(base + 1))
    hosts = [str(ipaddress.ip_address(base + 2 + i)) for i in range(count)]
    unused = str(ipaddress.ip_address(base + size - 2))
    return bridge, hosts, unused


def _keygen(path: Path, comment: str) -> str:
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path))
    path.chmod(0o600)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def _write_standins(bed: TestBed) -> Path:
    bin_dir = bed.root / "bin"
    bin_dir.mkdir()
    # A copy beside the wrappers: the checkout may live under /tmp, which every
    # host replaces with a private one, so the repository path is not visible there.
    standin = bin_dir / STANDIN.name
    shutil.copyfile(STANDIN, standin)
    for tool in ("kubeadm", "kubectl", "etcdctl"):
        script = bin_dir / tool
        script.write_text(
            f"#!/bin/sh\nLCCN_STANDIN_DIR='{bed.cluster_dir}' "
            f"exec /usr/bin/python3 '{standin}' {tool} \"$@\"\n"
        )
        script.chmod(0o755)
    _write_exportfs(bin_dir)
    return bin_dir


def _write_exportfs(bin_dir: Path) -> None:
    """``exportfs`` on every host: the exports served by NFS-Ganesha (see its docstring)."""
    target = bin_dir / EXPORTFS.name
    shutil.copyfile(EXPORTFS, target)
    script = bin_dir / "exportfs"
    script.write_text(f"#!/bin/sh\nexec /usr/bin/python3 '{target}' \"$@\"\n")
    script.chmod(0o755)


def _write_real_tools(bed: TestBed) -> Path:
    """PATH of the real mode: the built binaries, the kubelet stand-in, a systemctl."""
    bin_dir = bed.root / "bin"
    bin_dir.mkdir()
    # Each host bind-mounts the cache's bin directory here before its private /root
    # hides the cache (see _start_host).
    (bed.root / "k8s-bin").mkdir()
    for tool in K8S_TOOLS:
        (bin_dir / tool).symlink_to(bed.root / "k8s-bin" / tool)
    standin = bin_dir / KUBELET_STANDIN.name
    shutil.copyfile(KUBELET_STANDIN, standin)
    kubelet = bin_dir / "kubelet"
    kubelet.write_text(
        "#!/bin/sh\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "
        f"exec /usr/bin/python3 '{standin}' \"$@\"\n"
    )
    kubelet.chmod(0o755)
    systemctl = bin_dir / "systemctl"
    shutil.copyfile(SYSTEMCTL_SHIM, systemctl)
    systemctl.chmod(0o755)
    _write_exportfs(bin_dir)
    return bin_dir


def _write_accounts(bed: TestBed, etc: Path, home: Path) -> None:
    """/etc/passwd, /etc/shadow, /etc/group and /etc/sudoers with the test user, into ``etc``
    (the upper layer of the host's /etc)."""
    assert bed.password is not None
    crypted = _run("openssl", "passwd", "-6", "-stdin", input_text=bed.password + "\n").strip()
    passwd = Path("/etc/passwd").read_text()
    shadow = Path("/etc/shadow").read_text()
    group = Path("/etc/group").read_text()
    passwd += f"{TEST_USER}:x:{TEST_UID}:{TEST_UID}:lccn test:{home}:/bin/bash\n"
    shadow += f"{TEST_USER}:{crypted}:19000:0:99999:7:::\n"
    group += f"{TEST_USER}:x:{TEST_UID}:\n"
    for name, text, mode in (
        ("passwd", passwd, 0o644),
        ("shadow", shadow, 0o640),
        ("group", group, 0o644),
        (
            "sudoers",
            'Defaults secure_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n'
            "Defaults !lecture\n"
            "root ALL=(ALL:ALL) ALL\n"
            f"{TEST_USER} ALL=(ALL:ALL) ALL\n",
            0o440,
        ),
    ):
        path = etc / name
        path.write_text(text)
        path.chmod(mode)


def _sshd_config(
    bed: TestBed, host_dir: Path, address: str, password: bool, port: int = 22
) -> Path:
    config = host_dir / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"ListenAddress {address}:{port}",
                f"HostKey {host_dir / 'ssh_host_ed25519_key'}",
                f"AuthorizedKeysFile {bed.root / 'authorized_keys'}",
                "PidFile none",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                f"PasswordAuthentication {'yes' if password else 'no'}",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "UseDNS no",
                "MaxSessions 32",
                "MaxStartups 64:30:128",
                "Subsystem sftp internal-sftp",
                "LogLevel INFO",
                "",
            ]
        )
    )
    return config


def _start_host(
    bed: TestBed,
    name: str,
    address: str,
    index: int,
    bin_dir: Path,
    port: int = 22,
    cluster: int | None = None,
) -> TestHost:
    """One sshd; ``port`` 22 creates the namespace of ``index``, another port joins it."""
    namespace = f"lccn-{bed.run_id}-{index}"
    veth_host = f"{bed.run_id}v{index}"
    veth_peer = f"{bed.run_id}p{index}"
    host_dir = bed.root / "hosts" / name
    host_dir.mkdir(parents=True)
    host_key = _keygen(host_dir / "ssh_host_ed25519_key", f"{name}-host")

    if port == 22:
        _run("ip", "netns", "add", namespace)
        _run("ip", "link", "add", veth_host, "type", "veth", "peer", "name", veth_peer)
        _run("ip", "link", "set", veth_peer, "netns", namespace)
        _run("ip", "link", "set", veth_host, "master", bed.bridge, "up")
        _run("ip", "-n", namespace, "link", "set", veth_peer, "name", "eth0")
        _run("ip", "-n", namespace, "addr", "add", f"{address}/{BLOCK_PREFIX}", "dev", "eth0")
        _run("ip", "-n", namespace, "link", "set", "eth0", "up")
        _run("ip", "-n", namespace, "link", "set", "lo", "up")

    mounts: list[tuple[str, str]] = []
    private_dirs = PRIVATE_DIRS
    if bed.kubernetes == "real":
        # First, while /root (and the cache in it) is still the machine's.
        mounts.append((str(k8s_bin_dir()), str(bed.root / "k8s-bin")))
        private_dirs += REAL_PRIVATE_DIRS
    for target in private_dirs:
        Path(target).mkdir(parents=True, exist_ok=True)  # mountpoints must exist
        private = host_dir / "fs" / target.strip("/").replace("/", "-")
        private.mkdir(parents=True)
        if target == "/tmp":
            private.chmod(0o1777)  # like the real /tmp: the login user uploads there
        mounts.append((str(private), target))
    etc_hosts = host_dir / "hosts"
    etc_hosts.write_text(f"127.0.0.1 localhost\n127.0.1.1 {name}\n{address} {name}\n")
    mounts.append((str(etc_hosts), "/etc/hosts"))
    mounts.append((str(bin_dir), "/usr/local/bin"))
    if cluster is not None:  # its own cluster: the stand-ins find its state where they look
        mounts.append((str(bed.group_dir(cluster)), str(bed.cluster_dir)))
    # The host's /etc is an overlay on the machine's: what the host writes there stays
    # its own, and the test user's account files sit in the upper layer. (Files bound
    # one by one over /etc/passwd and co. came undone whenever the machine's package
    # manager replaced those files, e.g. adduser during an apt install.)
    etc_upper, etc_work = host_dir / "etc", host_dir / "etc-work"
    etc_upper.mkdir()
    etc_work.mkdir()
    if bed.password is not None:
        home = host_dir / "home"
        home.mkdir()
        os.chown(home, TEST_UID, TEST_UID)
        _write_accounts(bed, etc_upper, home)

    config = _sshd_config(bed, host_dir, address, bed.password is not None, port)
    inner = [
        f"hostname {name}",
        f"mount -t overlay lccn-etc -o lowerdir=/etc,upperdir='{etc_upper}',"
        f"workdir='{etc_work}' /etc",
    ]
    inner += [f"mount --bind '{src}' '{dst}'" for src, dst in mounts]
    inner.append(f"exec {SSHD} -D -e -f '{config}'")
    log = (host_dir / "sshd.log").open("wb")
    with log:
        proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                namespace,
                "unshare",
                "--uts",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-ec",
                " && ".join(inner),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # survives the CLI; torn down by namespace
        )
    _PROCS[proc.pid] = proc
    return TestHost(
        name=name,
        address=address,
        namespace=namespace,
        port=port,
        host_key=host_key,
        pid=proc.pid,
        cluster=cluster,
    )


def _wait_listening(bed: TestBed, deadline: float) -> None:
    pending = list(bed.hosts)
    while pending:
        host = pending[0]
        try:
            with socket.create_connection((host.address, host.port), timeout=0.5) as sock:
                sock.settimeout(2)
                if sock.recv(64).startswith(b"SSH-"):
                    pending.pop(0)
                    continue
        except OSError:
            pass
        if not _alive(host.pid):
            log = bed.root / "hosts" / host.name / "sshd.log"
            raise RuntimeError(f"sshd of {host.name} exited: {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"sshd of {host.name} not listening on {host.address}:{host.port}")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    proc = _PROCS.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return waited == 0


def create(
    count: int,
    *,
    names: Sequence[str] | None = None,
    password: bool = True,
    join_delay: float = 0.0,
    start_timeout: float = 20.0,
    kubernetes: KubernetesMode = "standin",
    ports_per_address: int = 1,
    clusters: Sequence[int | None] | None = None,
) -> TestBed:
    """Create ``count`` sshd hosts; tear down everything if any step fails.

    Arguments:
        count: number of hosts (at most 27 x ``ports_per_address`` per bed).
        names: hostnames (default ``node<last octet>``, ``-<port>`` added off port 22).
        password: also enable password auth with a test user that may sudo.
        join_delay: seconds every stand-in ``kubeadm join`` sleeps.
        start_timeout: how long to wait for every sshd to listen.
        kubernetes: ``standin`` or ``real`` tools on the hosts' PATH (see the module).
        ports_per_address: hosts per address (and namespace), each on its own port:
            host ``i`` has address ``i // ports_per_address``, port 22 first, then
            2201, 2202 ... (the stand-in tier only).
        clusters: per host, the number of its own stand-in cluster, or ``None`` for
            the bed's shared one.

    Returns:
        The bed; pass it to :func:`destroy`.

    Raises:
        PermissionError: not root.
        FileNotFoundError: sshd, or (real mode) the built Kubernetes binaries, missing.
    """
    if os.geteuid() != 0:
        raise PermissionError("test hosts need root (network namespaces, mounts)")
    if not Path(SSHD).exists():
        raise FileNotFoundError(f"{SSHD} missing: run scripts/setup.d/10-sshd.sh")
    if kubernetes == "real" and (why := k8s_missing()) is not None:
        raise FileNotFoundError(why)
    run_id = "lt" + secrets.token_hex(3)[:5]
    root = BASE_ROOT / run_id
    root.mkdir(parents=True)
    root.chmod(0o755)  # the test user reads authorized_keys and runs the stand-ins
    (root / "owner.pid").write_text(str(os.getpid()))
    block = _reserve_block(run_id)
    per = ports_per_address
    bridge_addr, addresses, unused = _addresses(block, -(-count // per))
    ports = [22 if i % per == 0 else 2200 + i % per for i in range(count)]
    addresses = [addresses[i // per] for i in range(count)]
    groups = list(clusters) if clusters is not None else [None] * count
    if len(groups) != count or (per > 1 and kubernetes == "real"):
        raise ValueError("clusters needs one entry per host; several ports: stand-ins only")
    cluster_dir = root / "cluster"
    cluster_dir.mkdir()
    # kubectl runs as the login user too (with a copy of admin.conf), like on Tacker's VMs.
    cluster_dir.chmod(0o777)
    for shared in ("state.lock", "calls.jsonl"):
        (cluster_dir / shared).touch()
        (cluster_dir / shared).chmod(0o666)
    bed = TestBed(
        run_id=run_id,
        root=root,
        bridge=f"{run_id}br",
        bridge_address=bridge_addr,
        block=block,
        client_key=root / "client_ed25519",
        known_hosts=root / "known_hosts",
        unused_address=unused,
        cluster_dir=cluster_dir,
        user=TEST_USER if password else None,
        password=secrets.token_urlsafe(12) if password else None,
        kubernetes=kubernetes,
    )
    _save_meta(bed)
    try:
        client_pub = _keygen(bed.client_key, f"lccn-test-{run_id}")
        (root / "authorized_keys").write_text(client_pub + "\n")
        bed.set_join_delay(join_delay)
        _run("ip", "link", "add", bed.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{bridge_addr}/{BLOCK_PREFIX}", "dev", bed.bridge)
        _run("ip", "link", "set", bed.bridge, "up")
        bin_dir = _write_real_tools(bed) if kubernetes == "real" else _write_standins(bed)
        host_names = (
            list(names)
            if names
            else [
                f"node{a.rsplit('.', 1)[1]}" + (f"-{p}" if p != 22 else "")
                for a, p in zip(addresses, ports, strict=True)
            ]
        )
        if len(host_names) != count:
            raise ValueError("names must have one entry per host")
        for number in sorted({g for g in groups if g is not None}):
            group = bed.group_dir(number)
            group.mkdir(parents=True)
            group.chmod(0o777)
            for shared in ("state.lock", "calls.jsonl"):
                (group / shared).touch()
                (group / shared).chmod(0o666)
            (group / "join_delay").write_text(f"{join_delay}\n")
        for i, (name, address) in enumerate(zip(host_names, addresses, strict=True)):
            bed.hosts.append(
                _start_host(bed, name, address, i // per, bin_dir, ports[i], groups[i])
            )
            _save_meta(bed)
        _wait_listening(bed, time.monotonic() + start_timeout)
        bed.known_hosts.write_text(
            "".join(f"{h.known_hosts_name} {h.host_key}\n" for h in bed.hosts)
        )
    except BaseException:
        destroy(bed)
        raise
    return bed


def reset_cluster(bed: TestBed) -> None:
    """Forget the stand-in cluster and empty every host's private directories.

    The hosts keep running (and their sshd host keys); what a previous test
    left in /etc/kubernetes, /tmp, /root ... and the shared state are gone. In the
    real mode the kubelet stand-ins and the static pods they run are stopped first.
    """
    if bed.kubernetes == "real":
        stop_kubernetes(bed)
    for directory in (bed.cluster_dir, *bed.group_dirs()):
        for name in ("state.json", "calls.jsonl"):
            (directory / name).write_text("")
    for host in bed.hosts:
        wipe_host(bed, host)


def wipe_host(bed: TestBed, host: TestHost) -> None:
    """What deleting or rebuilding a host's VM does to it: its private files are gone.

    The stand-in cluster keeps whatever it knew of the host (its Node object,
    its etcd member), as a real cluster does when a VM disappears. In the real
    mode the host's kubelet stand-in and static pods stop first (the VM is gone).
    """
    if bed.kubernetes == "real":
        stop_kubernetes(bed, hosts=[host])
    host_dir = bed.root / "hosts" / host.name
    for private in (host_dir / "fs").iterdir():
        for entry in private.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    (host_dir / "hosts").write_text(
        f"127.0.0.1 localhost\n127.0.1.1 {host.name}\n{host.address} {host.name}\n"
    )


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _k8s_rank(argv: Sequence[str]) -> int | None:
    """Stop rank of a real-mode process (its place in K8S_PROCESSES), else None."""
    if not argv:
        return None
    names = [os.path.basename(argv[0])]
    if len(argv) > 1 and names[0].startswith("python"):
        names.append("kubelet" if "kubelet_standin" in argv[1] else "")
    for name in names:
        if name in K8S_PROCESSES:
            return K8S_PROCESSES.index(name)
    return None


def _wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    left = list(pids)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if _running(pid)]
    return left


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def inside(host: TestHost, *argv: str, net_only: bool = False) -> subprocess.CompletedProcess[str]:
    """``argv`` run in ``host``'s network and mount namespaces (``net_only``: its network
    alone, with this machine's files), output as text; never raises on its exit code."""
    spaces = ["-n"] if net_only else ["-n", "-m"]
    return subprocess.run(
        ["nsenter", "-t", str(host.pid), *spaces, *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


def nodes_ready(nodes: dict[str, Any]) -> dict[str, bool]:
    """Node name -> whether its Ready condition is True (``nodes``: ``kubectl get nodes -o
    json``)."""
    out = {}
    for node in nodes["items"]:
        conditions = node["status"].get("conditions") or []
        out[node["metadata"]["name"]] = any(
            c["type"] == "Ready" and c["status"] == "True" for c in conditions
        )
    return out


def admin_kubectl(bed: TestBed, master: TestHost, *argv: str) -> subprocess.CompletedProcess[str]:
    """The real kubectl ``argv`` from this process with ``master``'s admin kubeconfig (real
    mode), output as text; never raises on its exit code. What it prints stays in the
    result: callers that read secrets keep them out of messages."""
    config = bed.private_dir(master, "/etc/kubernetes") / "admin.conf"
    return subprocess.run(
        [str(k8s_bin_dir() / "kubectl"), "--kubeconfig", str(config), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")},
    )


def nodes_json(bed: TestBed, master: TestHost) -> dict[str, Any] | None:
    """``kubectl get nodes -o json``, asked of the real API server from this process with
    the master's admin kubeconfig (real mode); None while there is none or it does not
    answer."""
    if not (bed.private_dir(master, "/etc/kubernetes") / "admin.conf").exists():
        return None
    out = admin_kubectl(bed, master, "get", "nodes", "-o", "json")
    return json.loads(out.stdout) if out.returncode == 0 else None  # type: ignore[no-any-return]


def ready_nodes(bed: TestBed, master: TestHost) -> dict[str, bool]:
    """Node name -> Ready, as :func:`nodes_json` reads them; empty while it reads none."""
    nodes = nodes_json(bed, master)
    return {} if nodes is None else nodes_ready(nodes)


def kubernetes_processes(host: TestHost) -> list[str]:
    """Names (from ``K8S_PROCESSES``) of the real-mode processes running on ``host``."""
    names = []
    for pid in _namespace_pids(host.namespace):
        rank = _k8s_rank(_cmdline(pid))
        if rank is not None and _running(pid):
            names.append(K8S_PROCESSES[rank])
    return sorted(names, key=K8S_PROCESSES.index)


def stop_kubernetes(
    bed: TestBed, timeout: float = 60.0, *, hosts: Sequence[TestHost] | None = None
) -> None:
    """Stop every kubelet stand-in and static-pod process of the bed's hosts.

    The stand-ins first (SIGTERM: each stops its processes, the API server before
    etcd), then whatever is left, in the same order (SIGTERM, SIGKILL after 10 s).

    Arguments:
        hosts: only these hosts' (default: every host of the bed).
    """
    chosen = list(hosts) if hosts is not None else bed.hosts
    standins: list[int] = []
    for host in chosen:
        pidfile = bed.private_dir(host, "/var/lib/kubelet") / "standin.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pidfile.read_text().strip())
            if _running(pid) and _k8s_rank(_cmdline(pid)) == K8S_PROCESSES.index("kubelet"):
                os.kill(pid, signal.SIGTERM)
                standins.append(pid)
    _wait_gone(standins, timeout)
    namespaces = {host.namespace for host in chosen}
    left: list[tuple[int, int]] = []
    for ns in namespaces:
        for pid in _namespace_pids(ns):
            rank = _k8s_rank(_cmdline(pid))
            if rank is not None:
                left.append((rank, pid))
    for _, pid in sorted(left):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if _wait_gone([pid], 10.0):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone([pid], 5.0)


def _save_meta(bed: TestBed) -> None:
    (bed.root / "bed.json").write_text(bed.to_json())


def _namespace_pids(namespace: str) -> list[int]:
    out = _run("ip", "netns", "pids", namespace, check=False)
    return [int(pid) for pid in out.split()]


def _destroy_from_meta(meta: dict[str, object]) -> None:
    run_id = str(meta["run_id"])
    namespaces = [f"lccn-{run_id}-{i}" for i in range(64)]
    existing = set(_run("ip", "netns", "list", check=False).split())
    namespaces = [ns for ns in namespaces if ns in existing]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = False
        for ns in namespaces:
            for pid in _namespace_pids(ns):
                left = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        if not left:
            break
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and any(_namespace_pids(ns) for ns in namespaces):
            for ns_pid in (p for ns in namespaces for p in _namespace_pids(ns)):
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(ns_pid, os.WNOHANG)
            time.sleep(0.05)
    for ns in namespaces:
        _run("ip", "netns", "del", ns, check=False)
    _run("ip", "link", "del", str(meta["bridge"]), check=False)
    shutil.rmtree(BASE_ROOT / run_id, ignore_errors=True)
    block = meta.get("block")
    if block is not None:
        block_dir = BASE_ROOT / "blocks" / str(block)
        with contextlib.suppress(OSError):
            if (block_dir / "owner").read_text().strip() == run_id:
                shutil.rmtree(block_dir, ignore_errors=True)


def destroy(bed: TestBed) -> None:
    """Kill every process in the bed's namespaces, delete them, the bridge and the files."""
    if bed.kubernetes == "real":
        with contextlib.suppress(OSError):
            stop_kubernetes(bed, timeout=30.0)
    for host in bed.hosts:
        with contextlib.suppress(ChildProcessError, OSError):
            os.kill(host.pid, signal.SIGTERM)
    meta = json.loads(bed.to_json())
    _destroy_from_meta(meta)
    for host in bed.hosts:  # reap our own children
        proc = _PROCS.pop(host.pid, None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)


def destroy_all() -> int:
    """Tear down every bed under :data:`BASE_ROOT` (after a crash). Returns how many."""
    count = 0
    if not BASE_ROOT.exists():
        return 0
    for meta_file in BASE_ROOT.glob("*/bed.json"):
        with contextlib.suppress(OSError, ValueError):
            _destroy_from_meta(json.loads(meta_file.read_text()))
            count += 1
    return count


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="create hosts; prints the bed as JSON")
    up.add_argument("--count", type=int, default=3)
    up.add_argument("--no-password", action="store_true")
    up.add_argument("--join-delay", type=float, default=0.0)
    up.add_argument("--kubernetes", choices=("standin", "real"), default="standin")
    down = sub.add_parser("down", help="remove a bed (its directory) or --all")
    down.add_argument("run_dir", nargs="?")
    down.add_argument("--all", action="store_true")
    args = parser.parse_args(argv)
    if args.cmd == "up":
        bed = create(
            args.count,
            password=not args.no_password,
            join_delay=args.join_delay,
            kubernetes=args.kubernetes,
        )
        if bed.password is not None:
            secret = bed.root / "password"
            secret.write_text(bed.password)
            secret.chmod(0o600)
        print(bed.to_json())
        return 0
    if args.all:
        print(f"removed {destroy_all()} bed(s)")
        return 0
    if not args.run_dir:
        parser.error("down needs RUN_DIR or --all")
    meta_file = Path(args.run_dir) / "bed.json"
    try:
        _destroy_from_meta(json.loads(meta_file.read_text()))
    except FileNotFoundError:
        print(f"no bed at {args.run_dir}", file=sys.stderr)
        return errno.ENOENT
    return 0


if __name__ == "__main__":
    sys.exit(main())
