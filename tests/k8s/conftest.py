"""Fixtures of the ``k8s`` tier: SSH test hosts running a real Kubernetes 1.20.2 control plane.

The hosts (:mod:`tests.testbed.testhosts`, ``kubernetes="real"``) have the kubeadm,
kubectl and control-plane binaries built by ``scripts/setup.d/40-k8s.sh``, Debian's
etcd, and the kubelet stand-in on their PATH. Missing binaries fail the tier: it is
never skipped (CI builds them with the README's test command).

The session's peak memory (every process in the hosts' namespaces, pytest itself and
every process it started: Tacker, ``serve``, the simulated OpenStack; sampled twice a
second) is printed in the terminal summary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.full_loop import loop_hosts, serve
from tests.testbed import testhosts
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.testhosts import TestBed

__all__ = ["k8s_hosts", "k8s_sim", "loop_hosts", "restore_hostnames", "serve"]

HOSTS = 5  # the complex flavour: three masters, two workers (simple: the first three)

_peak: dict[str, float] = {}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _peak:
        return
    top = sorted(((v, k) for k, v in _peak.items() if k != "total"), reverse=True)[:6]
    parts = ", ".join(f"{name} {mib:.0f}" for mib, name in top)
    terminalreporter.write_line(
        f"k8s tier peak memory: {_peak['total']:.0f} MiB RSS (hosts' processes, pytest and "
        "what it started); "
        f"per process MiB: {parts}"
    )


class MemorySampler(threading.Thread):
    """Sums the RSS of the bed's processes (and ours) twice a second; keeps the peaks."""

    def __init__(self, bed: TestBed) -> None:
        super().__init__(name="k8s-memory", daemon=True)
        self.inodes = set()
        for host in bed.hosts:
            try:
                self.inodes.add(os.stat(f"/run/netns/{host.namespace}").st_ino)
            except OSError:
                continue
        self.done = threading.Event()

    def sample(self) -> None:
        total = 0.0
        per_name: dict[str, float] = {}
        statuses: dict[int, dict[str, str]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                in_hosts = os.stat(f"/proc/{pid}/ns/net").st_ino in self.inodes
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            fields["in_hosts"] = "1" if in_hosts else ""
            statuses[pid] = fields
        for pid, fields in statuses.items():
            if not (fields["in_hosts"] or self._descends_from_us(pid, statuses)):
                continue
            rss = fields.get("VmRSS", "0 kB").split()
            mib = int(rss[0]) / 1024 if rss else 0.0
            name = "pytest" if pid == os.getpid() else fields.get("Name", "?").strip()
            total += mib
            per_name[name] = max(per_name.get(name, 0.0), mib)
        _peak["total"] = max(_peak.get("total", 0.0), total)
        for name, mib in per_name.items():
            _peak[name] = max(_peak.get(name, 0.0), mib)

    @staticmethod
    def _descends_from_us(pid: int, statuses: dict[int, dict[str, str]]) -> bool:
        """pytest itself, or a process it started (Tacker, serve, the simulator ...)."""
        seen = 0
        while pid > 1 and seen < 64:
            if pid == os.getpid():
                return True
            try:
                pid = int(statuses[pid]["PPid"].strip())
            except (KeyError, ValueError):
                return False
            seen += 1
        return False

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.sample()


@pytest.fixture(scope="session")
def k8s_hosts() -> Iterator[TestBed]:
    """The session's hosts with the real tools (``testhosts.TestBed``, real mode)."""
    problems = []
    if (why := testhosts.k8s_missing()) is not None:
        problems.append(why)
    if not Path(testhosts.SSHD).exists() or shutil.which("unshare") is None:
        problems.append("sshd or unshare missing: run `bash scripts/setup.d/10-sshd.sh`")
    if os.geteuid() != 0:
        problems.append("the k8s tier needs root (network namespaces, mounts)")
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)
    bed = testhosts.create(HOSTS, password=True, kubernetes="real")
    sampler = MemorySampler(bed)
    sampler.start()
    try:
        yield bed
    finally:
        sampler.done.set()
        sampler.join()
        testhosts.destroy(bed)


@pytest.fixture(scope="session")
def k8s_sim(k8s_hosts: TestBed) -> Iterator[SimProcess]:
    """The simulated OpenStack whose VNFC ports take the k8s hosts' addresses, in order
    (masters first), and whose VIP is the hosts' block's address nobody answers on."""
    proc = SimProcess(
        server_pool=",".join(h.address for h in k8s_hosts.hosts),
        vip_pool=k8s_hosts.unused_address,
    )
    proc.start()
    yield proc
    proc.stop()


def restore_hostnames(bed: TestBed) -> None:
    """Give the hosts their own names back (the cluster flows rename them)."""
    for host in bed.hosts:
        subprocess.run(["nsenter", "-t", str(host.pid), "-u", "hostname", host.name], check=False)


@pytest.fixture
def hosts(k8s_hosts: TestBed) -> Iterator[TestBed]:
    """The session's hosts with no cluster on them, and none left after the test."""
    testhosts.reset_cluster(k8s_hosts)
    yield k8s_hosts
    testhosts.reset_cluster(k8s_hosts)
    restore_hostnames(k8s_hosts)
