"""A fleet that grows: N VNF instances INSTANTIATE at once, each a 1-master, 2-worker cluster.

For each N of ``--sizes`` (default 1, 10, 50), a real Service (``serve``'s
ingest, store, runner, lanes, SSH pool and the real cluster handlers; SQLite
file store, or ``--database`` PostgreSQL) runs in this process with the
in-memory Tacker and OpenStack of the tests (``tests/testbed/cluster_vnf.py``),
which answer from memory, so only our side is timed. N INSTANTIATE COMPLETED
notifications are posted at once over HTTP, as Tacker sends them; each job
installs its cluster over SSH on sshd test hosts (``tests/testbed/testhosts.py``)
with the stand-in kubeadm, every ``kubeadm join`` given a fixed cost
(``--join-cost``, default 1.5 s, as ``bench/scale_join.py``: a real join waits on
the API server and the kubelet), and writes the cluster back to Tacker.

Hosts: 3 x the largest N are needed; a bed holds 27 addresses (namespaces), so
several instances' VMs share an address: each address runs several sshd, one per
port (22, 2201, 2202 ...), each with its own hostname, private directories and
stand-in cluster (``testhosts.create(ports_per_address=..., clusters=...)``). An
instance's three VMs are on three addresses at one port (its ``ssh_port``
parameter). The hosts are reset between sizes.

Prints per N: the wall time from the first post until every cluster is written
back, p50/p99 of the time per instance (its post to its write-back), the peak of
SSH connections (the pool's own count, and the bench's established TCP
connections to the hosts sampled every 50 ms), and memory counted as
``bench/memory.py`` counts it (``benchlib.tree_resident_mb``): ``serve`` runs in
this process, so it is this process's (serve, the fakes and the load
generator), at the end of each size. The peak of connections is bounded by
``ssh.max_connections`` (``--max-connections``, default the setting's), not by N.
Also per N: the CPU seconds of this process and of the whole machine until the
last write-back, the wait for a lane, the time between steps and the slowest
steps (from the store).

Context, measured in the same run (``--no-floor`` skips it): the floor, the
hosts' share alone for the smallest and the largest N without ``serve`` (upload
the install script, ``init`` the master, join both workers, over a plain pool
with no connection limit). The VMs here share this machine's CPUs with ``serve``
(on Tacker's VMs they have their own), so the floor's own ratio shows how far
the machine lets any driver scale.

Last line: ``ratio=`` (50 x t(1)) / t(50), or with other sizes
(largest x t(smallest)) / (smallest x t(largest)).

Needs root (namespaces); run ``scripts/setup.d/10-sshd.sh`` first.
``python bench/fleet.py [--sizes 1,10,50] [--database URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/fleet.py` from a checkout
    sys.path.insert(0, str(ROOT))

from benchlib import (  # noqa: E402
    HEADERS,
    add_database_argument,
    backend_name,
    free_port,
    machine,
    notification,
    rss_mb,
    scratch_database,
    tree_resident_mb,
)

from handlers.toolkit.install_report import parse_install_output  # noqa: E402
from subscriber.config import SshSettings  # noqa: E402
from subscriber.kernel.ports import KubernetesAccess, SshTarget  # noqa: E402
from subscriber.ssh import SshPool  # noqa: E402
from tests.testbed import testhosts  # noqa: E402
from tests.testbed.cluster_vnf import FakeOpenStack, FakeTacker, cluster_vnf, k8s_params  # noqa: E402

ENV = {"K8S_SKIP_PHASES": "packages,cni"}
INSTALL = ROOT / "handlers" / "toolkit" / "node" / "install_k8s_cluster.sh"
SCRIPT = "/tmp/install_k8s_cluster.sh"
ADDRESSES = 27  # per bed (testhosts)


@dataclass
class TimedTacker(FakeTacker):
    """The fake Tacker, noting when each instance's cluster is written back."""

    written: dict[str, float] = field(default_factory=dict)
    all_written: asyncio.Event = field(default_factory=asyncio.Event)
    expected: int = 0

    async def write_back(
        self, vnf_instance_id: str, access: KubernetesAccess, *, api: str = "v2"
    ) -> str:
        out = await super().write_back(vnf_instance_id, access, api=api)
        self.written.setdefault(vnf_instance_id, time.perf_counter())
        if len(self.written) >= self.expected:
            self.all_written.set()
        return out


def layout(largest: int) -> tuple[int, int, list[list[int]], list[int | None]]:
    """(hosts, ports per address, each instance's 3 host indexes, each host's cluster)."""
    per = -(-3 * largest // ADDRESSES)
    groups = -(-largest // per)  # triples of addresses
    count = 3 * groups * per
    instances = []
    clusters: list[int | None] = [None] * count
    for i in range(largest):
        group, slot = i % groups, i // groups
        hosts = [(3 * group + r) * per + slot for r in range(3)]
        instances.append(hosts)
        for h in hosts:
            clusters[h] = i
    return count, per, instances, clusters


class ConnectionSampler:
    """Established TCP connections from this network namespace to the bed's sshd ports."""

    def __init__(self, bed: Any) -> None:
        block = ipaddress.ip_network(f"{bed.bridge_address}/{testhosts.BLOCK_PREFIX}", strict=False)
        self.block = block
        self.peak = 0
        self._task: asyncio.Task[None] | None = None

    def count(self) -> int:
        n = 0
        with open("/proc/net/tcp") as fh:
            next(fh)
            for line in fh:
                parts = line.split()
                if parts[3] != "01":  # ESTABLISHED
                    continue
                addr_hex, port_hex = parts[2].split(":")
                port = int(port_hex, 16)
                if port != 22 and not 2200 < port < 2300:  # not sshd (the API server's port)
                    continue
                if ipaddress.IPv4Address(bytes.fromhex(addr_hex)[::-1]) in self.block:
                    n += 1
        return n

    async def _run(self) -> None:
        while True:
            self.peak = max(self.peak, self.count())
            await asyncio.sleep(0.05)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="fleet-ssh-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.peak = max(self.peak, self.count())


@dataclass
class SizeResult:
    n: int
    wall: float
    per_instance: list[float]
    pool_peak: int
    tcp_peak: int
    waited: int
    evicted: int
    memory_mb: float
    peak_rss_mb: float
    cpu_ours: float  # CPU seconds of this process (serve, fakes, load) during the size
    cpu_machine: float  # CPU seconds of the whole machine (hosts, stand-ins, other work)
    steps: dict[str, list[float]]  # step name -> its duration in each job
    queued: list[float]  # each event: received -> its job's first step started
    between: list[float]  # each job: its span less its steps' own time (store, lane, hand-offs)


def machine_cpu() -> float:
    """CPU seconds the machine has spent busy since boot (/proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def fleet_fakes(
    bed: Any, instances: list[list[int]], n: int
) -> tuple[TimedTacker, FakeOpenStack, list[tuple[str, str]]]:
    """One Tacker and OpenStack holding N cluster VNFs; [(instance, op-occ)]."""
    tacker, openstack = TimedTacker(expected=n), FakeOpenStack()
    out = []
    for hosts in instances[:n]:
        master, *workers = (bed.hosts[h] for h in hosts)
        params = k8s_params(master_user="root", worker_user="root", key=str(bed.client_key))
        block = params["k8s_cluster_installation_param"]
        block["master_node"]["ssh_port"] = master.port
        block["worker_node"]["ssh_port"] = master.port
        t, o, inst, occ = cluster_vnf([master.address], [w.address for w in workers], params=params)
        tacker.instances.update(t.instances)
        tacker.op_occs.update(t.op_occs)
        openstack.ports.update(o.ports)
        openstack.hosts.update(o.hosts)
        out.append((inst, occ))
    return tacker, openstack, out


async def run_size(
    bed: Any, instances: list[list[int]], n: int, database: str, max_connections: int | None
) -> SizeResult:
    import aiohttp

    from handlers import default_routing
    from subscriber.config import ClusterSettings, DatabaseSettings, HttpSettings, Settings
    from subscriber.kernel import Services
    from subscriber.service import Service

    tacker, openstack, pairs = fleet_fakes(bed, instances, n)
    cluster = ClusterSettings(
        script_env=ENV, token_wait_timeout=30.0, install_timeout=300.0, haproxy_reload=""
    )
    # The production connect timeout (the test beds' 5 s is for tests of unreachable hosts).
    ssh: dict[str, Any] = bed.ssh_section(
        command_timeout=300.0, connect_timeout=SshSettings().connect_timeout
    )
    if max_connections is not None:
        ssh["max_connections"] = max_connections
    config = Settings(
        http=HttpSettings(host="127.0.0.1", port=free_port()),
        database=DatabaseSettings(url=database),
        ssh=SshSettings(**ssh),
        cluster=cluster,
    )
    svc = Service(
        config,
        routing=default_routing(cluster=cluster, cluster_handlers=True),
        services=Services(tacker=tacker, openstack=openstack),
    )
    url = f"http://127.0.0.1:{config.http.port}{config.http.path}"
    sampler = ConnectionSampler(bed)
    posted: dict[str, float] = {}
    async with svc:
        sampler.start()
        cpu_start, machine_start = own_cpu(), machine_cpu()
        started = time.perf_counter()
        async with aiohttp.ClientSession() as http:

            async def post(inst: str, occ: str) -> None:
                posted[inst] = time.perf_counter()
                body = notification(inst, occ, "INSTANTIATE", "COMPLETED", vnfcs=3)
                async with http.post(url, data=body, headers=HEADERS) as resp:
                    if resp.status != 204:
                        raise RuntimeError(f"unexpected status {resp.status}")

            await asyncio.gather(*(post(i, o) for i, o in pairs))
        try:
            await asyncio.wait_for(tacker.all_written.wait(), timeout=600)
        except TimeoutError:
            events = await svc.store.events.list()
            states = sorted({e.status for e in events})
            raise RuntimeError(
                f"{len(tacker.written)} of {n} clusters written back in 600 s; events: {states}"
            ) from None
        wall = max(tacker.written.values()) - started
        cpu_ours, cpu_machine = own_cpu() - cpu_start, machine_cpu() - machine_start
        await sampler.stop()
        assert svc.ssh is not None
        pool = svc.ssh
        pool_peak, waited, evicted = pool.peak_connections, pool.waited, pool.evicted
        memory, _ = tree_resident_mb([os.getpid()])
        _, peak_rss = rss_mb(os.getpid())
        # Every job ended well, and every cluster has its master and both workers.
        for _ in range(200):
            events = await svc.store.events.list()
            if all(e.status == "done" for e in events):
                break
            await asyncio.sleep(0.05)
        bad = [e.status for e in events if e.status != "done"]
        if bad:
            raise RuntimeError(f"jobs not done: {bad}")
        steps, queued, between = await step_times(svc.store, events)
    for number, (inst, _) in enumerate(pairs):
        nodes = bed.group_state(number).get("nodes") or {}
        ready = [v for v in nodes.values() if v.get("ready")]  # type: ignore[union-attr]
        if len(ready) != 3:
            raise RuntimeError(f"instance {inst}: {len(ready)} ready nodes, expected 3")
    per_instance = [tacker.written[i] - posted[i] for i, _ in pairs]
    return SizeResult(
        n,
        wall,
        per_instance,
        pool_peak,
        sampler.peak,
        waited,
        evicted,
        memory,
        peak_rss,
        cpu_ours,
        cpu_machine,
        steps,
        queued,
        between,
    )


async def step_times(
    store: Any, events: list[Any]
) -> tuple[dict[str, list[float]], list[float], list[float]]:
    """Each step's durations over the jobs, each event's wait for its first step, and each
    job's time outside its steps."""
    steps: dict[str, list[float]] = {}
    queued, between = [], []
    for event in events:
        for job in await store.jobs.for_event(event.id):
            rows = [
                r
                for r in await store.jobs.steps(job.id)
                if r.started_at is not None and r.finished_at is not None
            ]
            if not rows:
                continue
            first, last = min(r.started_at for r in rows), max(r.finished_at for r in rows)
            queued.append(first - event.received_at)
            own = sum(r.finished_at - r.started_at for r in rows)
            between.append(last - first - own)
            for row in rows:
                steps.setdefault(row.name, []).append(row.finished_at - row.started_at)
    return steps, queued, between


async def floor(bed: Any, instances: list[list[int]], n: int) -> float:
    """Seconds the hosts' share alone takes for N clusters at once, without serve.

    Per instance, over a plain SSH pool with no connection limit: upload the
    install script to the three VMs, ``init`` the master, join both workers at
    once. The remote work the handler does besides (its checks, /etc/hosts,
    labels, the admin token) is left out, so this is a lower bound of what the
    machine needs for the VMs' side, and it shares the CPUs the same way.
    """
    testhosts.reset_cluster(bed)
    # 3 x N handshakes at once on a loaded machine: connecting may take long.
    settings = SshSettings(
        **bed.ssh_section(command_timeout=300.0, max_connections=3 * n, connect_timeout=120.0)
    )
    async with SshPool(settings) as pool:

        async def one(hosts: list[int]) -> None:
            master, *workers = (bed.hosts[h] for h in hosts)
            targets = [SshTarget(host=h.address, port=h.port) for h in (master, *workers)]
            await asyncio.gather(*(pool.upload(t, INSTALL, SCRIPT, mode=0o755) for t in targets))
            init = await pool.run(
                targets[0],
                f"bash {SCRIPT} -m {master.address} -i {master.address} -p 10.200.0.0/16",
                env=ENV,
            )
            report = parse_install_output(init.check().stdout)
            token = report.token.get_secret_value()
            join = f"-i {master.address} -t {token} -s {report.ssl_ca_cert_hash}"
            await asyncio.gather(
                *(
                    pool.run(
                        t,
                        f"bash {SCRIPT} -w {w.address} {join}",
                        env={**ENV, "ha_flag": "False"},
                        secrets=[token],
                    )
                    for t, w in zip(targets[1:], workers, strict=True)
                )
            )

        started = time.perf_counter()
        await asyncio.gather(*(one(hosts) for hosts in instances[:n]))
        return time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def main_async(
    bed: Any,
    instances: list[list[int]],
    sizes: list[int],
    tmp: Path,
    server: str,
    limit: int | None,
    floors: dict[int, float],
) -> list[SizeResult]:
    results = []
    for n in sizes:
        if n in floors:
            floors[n] = await floor(bed, instances, n)
            print(f"N={n}: floor={floors[n]:.2f}s (the hosts' share alone, no serve)", flush=True)
        testhosts.reset_cluster(bed)
        async with scratch_database(server, tmp, f"fleet{n}") as database:
            results.append(await run_size(bed, instances, n, database, limit))
        r = results[-1]
        print(
            f"N={n}: wall={r.wall:.2f}s per_instance p50={percentile(r.per_instance, 50):.2f}s "
            f"p99={percentile(r.per_instance, 99):.2f}s ssh_peak={r.pool_peak} "
            f"(tcp sampled {r.tcp_peak}; calls that waited for a slot: {r.waited}, "
            f"idle connections closed for another: {r.evicted}) "
            f"memory={r.memory_mb:.1f} MB (VmHWM {r.peak_rss_mb:.1f} MB)",
            flush=True,
        )
        cores = os.cpu_count() or 1
        print(
            f"  CPU until the last write-back: this process {r.cpu_ours:.1f} s, the machine "
            f"{r.cpu_machine:.1f} s of {cores * r.wall:.1f} s ({cores} cores x wall): "
            f"{r.cpu_machine / (cores * r.wall):.0%} busy",
            flush=True,
        )
        slowest = sorted(r.steps.items(), key=lambda kv: -statistics.median(kv[1]))[:6]
        print(
            f"  waiting for a lane (received -> first step) p50 {percentile(r.queued, 50):.2f} s; "
            f"between steps p50 {percentile(r.between, 50):.2f} s; slowest steps (p50): "
            + ", ".join(f"{name} {statistics.median(d):.2f} s" for name, d in slowest),
            flush=True,
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,10,50", help="comma-separated instance counts")
    parser.add_argument("--join-cost", type=float, default=1.5, help="seconds per kubeadm join")
    parser.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help=f"ssh.max_connections (default {SshSettings().max_connections})",
    )
    parser.add_argument(
        "--no-floor",
        action="store_true",
        help="skip the floor (the hosts' share alone) at the smallest and largest size",
    )
    add_database_argument(parser)
    args = parser.parse_args()
    # serve's per-job warnings (no auth, the built-in install script) would bury the figures.
    logging.disable(logging.WARNING)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    limit = args.max_connections or SshSettings().max_connections
    count, per, instances, clusters = layout(max(sizes))
    print(
        f"sizes={','.join(map(str, sizes))} (instances, each 1 master + 2 workers) "
        f"join_cost={args.join_cost:.2f}s ssh.max_connections={limit}"
    )
    print(
        f"hosts: {count} sshd on {count // per} addresses x {per} port(s) "
        "(VMs of several instances share an address, each on its own port)"
    )
    print(f"store: {backend_name(args.database)}; {machine()}")
    print(
        "serve runs in this process (in-memory Tacker/OpenStack): memory is this process's "
        "(benchlib.tree_resident_mb, as bench/memory.py counts)"
    )
    started = time.perf_counter()
    bed = testhosts.create(
        count,
        password=False,
        join_delay=args.join_cost,
        ports_per_address=per,
        clusters=clusters,
        start_timeout=120.0,
    )
    print(f"hosts up in {time.perf_counter() - started:.1f}s", flush=True)
    floors = {} if args.no_floor else {sizes[0]: 0.0, sizes[-1]: 0.0}
    try:
        with tempfile.TemporaryDirectory(prefix="lccn-bench-") as tmp:
            results = asyncio.run(
                main_async(
                    bed, instances, sizes, Path(tmp), args.database, args.max_connections, floors
                )
            )
    finally:
        testhosts.destroy(bed)
    worst = max(r.pool_peak for r in results)
    if worst > limit:
        print(f"error: {worst} SSH connections, above ssh.max_connections={limit}", file=sys.stderr)
        return 1
    small, large = results[0], results[-1]
    print(f"total_run={time.perf_counter() - started:.1f}s")
    if len(floors) == 2:
        f_small, f_large = floors[small.n], floors[large.n]
        print(
            f"context: the floor's own ratio (the hosts' share alone, same formula) "
            f"{(large.n * f_small) / (small.n * f_large):.2f}; ours over the floor: "
            f"N={small.n} {small.wall / f_small:.2f}x, N={large.n} {large.wall / f_large:.2f}x"
        )
    print(f"ratio={(large.n * small.wall) / (small.n * large.wall):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
