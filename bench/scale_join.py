"""Workers joining in parallel vs one after another (Tacker's driver joins them in turn).

Builds 11 real sshd hosts (tests/testbed/testhosts.py), initialises a one-master
cluster with the stand-in kubeadm, gives every ``kubeadm join`` a fixed cost
(``--join-cost``, default 1.5 s: the stand-in sleeps, like a real join waits on
the API server and the kubelet), then times the same worker step, the
install script's ``-w`` path over SSH, for 10 workers:

* sequential: one worker after another, as Tacker's ``instantiate_end`` and
  ``scale_end`` do;
* parallel: ``asyncio.gather`` over the SSH executor;
* handler: the product itself: a real Service (SQLite store, runner, SSH pool)
  builds a one-master cluster through the INSTANTIATE handler, then a SCALE
  COMPLETED for 10 added worker VNFCs runs the SCALE handler (discover, scripts,
  /etc/hosts on every node, the parallel joins, labels, reconcile), timed from
  the notification's 204 to the job's end. Tacker and OpenStack are the
  in-memory fakes of the tests (``tests/testbed/cluster_vnf.py``).

Each round starts from fresh connections and fresh nodes. Prints the figures,
then ``ratio=<sequential/handler>`` as the last line. Needs root (namespaces);
run ``scripts/setup.d/10-sshd.sh`` first. ``python bench/scale_join.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/scale_join.py` from a checkout
    sys.path.insert(0, str(ROOT))

from benchlib import (  # noqa: E402
    add_database_argument,
    backend_name,
    free_port,
    machine,
    notification,
    scratch_database,
)

from handlers.toolkit.install_report import parse_install_output  # noqa: E402
from subscriber.config import SshSettings  # noqa: E402
from subscriber.kernel.ports import SshTarget  # noqa: E402
from subscriber.ssh import SshPool  # noqa: E402
from tests.testbed import testhosts  # noqa: E402

SCRIPTS = ROOT / "handlers" / "toolkit" / "node"  # node-side files
SCRIPT = "/tmp/install_k8s_cluster.sh"
ENV = {"K8S_SKIP_PHASES": "packages,cni"}


def settings(bed: Any) -> SshSettings:
    return SshSettings(
        known_hosts=bed.known_hosts, client_keys=(bed.client_key,), command_timeout=120
    )


async def setup_cluster(bed: Any) -> tuple[str, str]:
    """Name the nodes, upload the script, init the master. Returns (token, CA hash)."""
    master = bed.hosts[0]
    async with SshPool(settings(bed)) as pool:

        async def prepare(host: Any, name: str) -> None:
            target = SshTarget(host=host.address)
            await pool.upload(target, SCRIPTS / "install_k8s_cluster.sh", SCRIPT, mode=0o755)
            await pool.run(target, f"hostname {name}")

        await asyncio.gather(
            *(
                prepare(h, ("master" if i == 0 else "worker") + h.address.rsplit(".", 1)[1])
                for i, h in enumerate(bed.hosts)
            )
        )
        result = await pool.run(
            SshTarget(host=master.address),
            f"bash {SCRIPT} -m {master.address} -i {master.address} -p 10.200.0.0/16",
            env=ENV,
        )
        report = parse_install_output(result.check().stdout)
    return report.token.get_secret_value(), report.ssl_ca_cert_hash


async def join_step(pool: SshPool, bed: Any, worker: Any, token: str, ca_hash: str) -> None:
    """The worker step a handler runs: the install script's join path."""
    master = bed.hosts[0]
    result = await pool.run(
        SshTarget(host=worker.address),
        f"bash {SCRIPT} -w {worker.address} -i {master.address} -t {token} -s {ca_hash}",
        env={**ENV, "ha_flag": "False"},
        secrets=[token],
    )
    result.check(step=f"join-{worker.name}")


async def reset_workers(bed: Any, workers: list[Any]) -> None:
    """Undo the joins (not timed): reset each worker, delete its node on the master."""
    async with SshPool(settings(bed)) as pool:
        names = await asyncio.gather(
            *(pool.run(SshTarget(host=w.address), "hostname") for w in workers)
        )
        await asyncio.gather(
            *(
                pool.run(SshTarget(host=w.address), "kubeadm reset -f && rm -f /tmp/installed")
                for w in workers
            )
        )
        node_names = " ".join(n.stdout.strip() for n in names)
        await pool.run(SshTarget(host=bed.hosts[0].address), f"kubectl delete node {node_names}")


async def timed_round(
    bed: Any, workers: list[Any], token: str, ca_hash: str, parallel: bool
) -> float:
    async with SshPool(settings(bed)) as pool:
        started = time.perf_counter()
        if parallel:
            await asyncio.gather(*(join_step(pool, bed, w, token, ca_hash) for w in workers))
        else:
            for worker in workers:
                await join_step(pool, bed, worker, token, ca_hash)
        elapsed = time.perf_counter() - started
    state = bed.state()
    joined = [n for n, v in state["nodes"].items() if not v["roles"] and v["ready"]]
    if len(joined) != len(workers):
        raise RuntimeError(f"expected {len(workers)} joined workers, state has {len(joined)}")
    return elapsed


async def handler_scale_out(bed: Any, database: str) -> tuple[float, float]:
    """(SCALE_OUT job seconds, whole run) of the real SCALE handler adding every worker."""
    import aiohttp

    from handlers import default_routing
    from subscriber.config import (
        ClusterSettings,
        DatabaseSettings,
        DispatchSettings,
        HttpSettings,
        Settings,
    )
    from subscriber.kernel import Services
    from subscriber.service import Service
    from tests.testbed.cluster_vnf import add_worker, cluster_vnf, k8s_params, lcm_op_occ

    testhosts.reset_cluster(bed)
    master, workers = bed.hosts[0], bed.hosts[1:]
    params = k8s_params(master_user="root", worker_user="root", key=str(bed.client_key))
    tacker, openstack, inst, occ = cluster_vnf([master.address], [], params=params)
    cluster = ClusterSettings(
        script_env=ENV, token_wait_timeout=10.0, install_timeout=120.0, haproxy_reload=""
    )
    config = Settings(
        http=HttpSettings(host="127.0.0.1", port=free_port()),
        database=DatabaseSettings(url=database),
        dispatch=DispatchSettings(rescan_interval=0.5, reorder_window=0.0),
        ssh=settings(bed),
        cluster=cluster,
    )
    svc = Service(
        config,
        routing=default_routing(cluster=cluster, cluster_handlers=True),
        services=Services(tacker=tacker, openstack=openstack),
    )
    url = f"http://127.0.0.1:{config.http.port}{config.http.path}"

    async def run(operation: str, occ_id: str) -> float:
        body = notification(inst, occ_id, operation, "COMPLETED")
        started = time.perf_counter()
        headers = {"Content-Type": "application/json"}
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, data=body, headers=headers) as resp,
        ):
            assert resp.status == 204
        while True:
            events = [e for e in await svc.store.events.list() if e.vnf_lcm_op_occ_id == occ_id]
            if events and events[0].status in ("done", "failed"):
                if events[0].status != "done":
                    raise RuntimeError(f"{operation} job failed")
                return time.perf_counter() - started
            await asyncio.sleep(0.05)

    async with svc:
        await run("INSTANTIATE", occ)
        for worker in workers:
            add_worker(tacker, openstack, inst, worker.address)
        scale = await run("SCALE", lcm_op_occ(tacker, inst, "SCALE"))
    joined = [n for n, v in bed.state()["nodes"].items() if not v["roles"] and v["ready"]]
    if len(joined) != len(workers):
        raise RuntimeError(f"expected {len(workers)} joined workers, state has {len(joined)}")
    return scale, len(joined)


async def main_async(
    bed: Any, workers: int, join_cost: float, tmp: Path, server: str
) -> tuple[float, float, float]:
    token, ca_hash = await setup_cluster(bed)
    bed.set_join_delay(join_cost)
    nodes = bed.hosts[1 : 1 + workers]
    sequential = await timed_round(bed, nodes, token, ca_hash, parallel=False)
    await reset_workers(bed, nodes)
    parallel = await timed_round(bed, nodes, token, ca_hash, parallel=True)
    async with scratch_database(server, tmp, "scale") as database:
        handler, _ = await handler_scale_out(bed, database)
    return sequential, parallel, handler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--join-cost", type=float, default=1.5, help="seconds per kubeadm join")
    add_database_argument(parser)
    args = parser.parse_args()
    started = time.perf_counter()
    bed = testhosts.create(args.workers + 1, password=False)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sequential, parallel, handler = asyncio.run(
                main_async(bed, args.workers, args.join_cost, Path(tmp), args.database)
            )
    finally:
        testhosts.destroy(bed)
    total = time.perf_counter() - started
    print(f"workers={args.workers} join_cost={args.join_cost:.2f}s")
    print(f"store: {backend_name(args.database)}; {machine()}")
    print(f"sequential={sequential:.2f}s ({sequential / args.workers:.2f}s per worker)")
    print(f"parallel={parallel:.2f}s (the join step alone, hand-written gather)")
    print(f"handler_scale_out={handler:.2f}s (SCALE COMPLETED through serve's SCALE handler)")
    print(f"floor={args.join_cost:.2f}s (one join) total_run={total:.1f}s")
    print(f"ratio={sequential / handler:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
