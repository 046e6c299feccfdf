"""``serve`` killed (SIGKILL) mid-job resumes at the first step not done, with the same plan."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from subscriber.config import SshSettings
from tests.cluster_fakes import INSTANTIATE_HEAD, INSTANTIATE_TAIL, cluster_vnf, k8s_params
from tests.conftest import free_port
from tests.factories import op_occ
from tests.programs import ServeProcess
from tests.testbed import testhosts

pytestmark = [pytest.mark.ssh, pytest.mark.asyncio, pytest.mark.usefixtures("restore_hostnames")]


async def _until(serve: ServeProcess, sql: str, timeout: float) -> list[tuple[object, ...]]:
    async with asyncio.timeout(timeout):
        while True:
            assert serve.proc is not None and serve.proc.poll() is None, serve.log_text()
            rows = serve.rows(sql)
            if rows:
                return rows
            await asyncio.sleep(0.05)


def _serve(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path, **extra_env: str
) -> tuple[ServeProcess, Path, str, str]:
    """A ``serve`` whose INSTANTIATE handler is the real one on the fakes of a 1+2 cluster."""
    master, workers = bed.hosts[0], bed.hosts[1:3]
    params = k8s_params(master_user="root", worker_user="root", key=str(bed.client_key))
    tacker, openstack, inst, occ = cluster_vnf(
        [master.address], [w.address for w in workers], params=params
    )
    fixture = tmp_path / "cluster.json"
    fixture.write_text(
        json.dumps(
            {
                "instances": tacker.instances,
                "op_occs": tacker.op_occs,
                "ports": [
                    {"stack": s, "cp": c, "fixed": list(p.fixed_ips), "floating": p.floating_ip}
                    for (s, c), p in openstack.ports.items()
                ],
                "hosts": openstack.hosts,
            }
        )
    )
    env = {
        "LCCN_HANDLERS__MODULES": json.dumps(["tests.ssh.cluster_serve_handler"]),
        "LCCN_TEST_CLUSTER": str(fixture),
        "LCCN_TEST_SCRIPT_ENV": json.dumps({"K8S_SKIP_PHASES": "packages,cni"}),
        "LCCN_SSH__KNOWN_HOSTS": str(ssh_settings.known_hosts),
        "LCCN_SSH__CLIENT_KEYS": json.dumps([str(bed.client_key)]),
        "LCCN_SSH__KEY_DIR": str(bed.client_key.parent),
        "LCCN_DISPATCH__RESCAN_INTERVAL": "0.3",
        "LCCN_DISPATCH__REORDER_WINDOW": "0.05",
        "LCCN_DISPATCH__BACKOFF_INITIAL": "0.2",
        **extra_env,
    }
    return ServeProcess(tmp_path, free_port(), env), fixture, inst, occ


async def _restart_until_done(serve: ServeProcess) -> None:
    """Start the killed serve again (on a new port) and wait until it finished the event."""
    serve.port = free_port()
    serve.start()
    await serve.ready()
    await _until(serve, "SELECT 1 FROM events WHERE status='done'", 120)


async def _notify(serve: ServeProcess, inst: str, occ: str) -> None:
    body = op_occ(instance=inst, op_occ_id=occ, operation="INSTANTIATE", state="COMPLETED")
    async with aiohttp.ClientSession() as http, http.post(serve.url, json=body) as resp:
        assert resp.status == 204


async def test_sigkill_during_worker_joins_resumes(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    testhosts.reset_cluster(bed)
    master, workers = bed.hosts[0], bed.hosts[1:3]
    serve, fixture, inst, occ = _serve(bed, ssh_settings, tmp_path)
    bed.set_join_delay(3.0)  # the worker joins take a while: the kill lands inside them
    try:
        serve.start()
        await serve.ready()
        await _notify(serve, inst, occ)
        # init-master's checkpoint is written as join-workers starts.
        await _until(
            serve, "SELECT 1 FROM steps WHERE name LIKE 'init-master-%' AND status='done'", 60
        )
        await asyncio.sleep(0.5)  # inside the joins (3 s each), not after them
        serve.kill(signal.SIGKILL)
        done_before = {r[0] for r in serve.rows("SELECT name FROM steps WHERE status='done'")}
        assert "join-workers" not in done_before and "write-back" not in done_before
        inits_before = len(_kubeadm(bed, "init"))
        assert inits_before == 1

        bed.set_join_delay(0.0)
        await _restart_until_done(serve)
    finally:
        serve.kill()
        bed.set_join_delay(0.0)

    # Resumed at join-workers: discovery .. init-master never ran again.
    jobs = serve.rows("SELECT id FROM jobs ORDER BY id")
    assert len(jobs) == 1
    steps = dict(serve.rows("SELECT name, status FROM steps"))
    assert steps["join-workers"] in ("done", "skipped") and steps["write-back"] == "done"
    assert len(_kubeadm(bed, "init")) == 1
    names = {f"worker{w.address.rsplit('.', 1)[1]}" for w in workers}
    assert set(bed.state()["nodes"]) == names | {f"master{master.address.rsplit('.', 1)[1]}"}
    writes = Path(str(fixture) + ".writes").read_text().splitlines()
    assert [json.loads(w)["endpoint"] for w in writes] == [f"https://{master.address}:6443"]


async def test_sigkill_during_discovery_rebuilds_the_same_plan(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    """Plans are pure: the plan built after the kill is the plan the checkpoints were for."""
    testhosts.reset_cluster(bed)
    master, workers = bed.hosts[0], bed.hosts[1:3]
    gate = tmp_path / "discovery-gate"
    serve, fixture, inst, occ = _serve(
        bed, ssh_settings, tmp_path, LCCN_TEST_DISCOVERY_GATE=str(gate)
    )
    try:
        serve.start()
        await serve.ready()
        await _notify(serve, inst, occ)
        async with asyncio.timeout(60):  # discovery is asking OpenStack: kill it there
            while not Path(str(gate) + ".waiting").exists():
                await asyncio.sleep(0.05)
        serve.kill(signal.SIGKILL)
        before = serve.rows("SELECT name, status FROM steps ORDER BY idx")
        assert before == [("confirm", "done"), ("load-params", "done")]

        gate.touch()
        await _restart_until_done(serve)
    finally:
        serve.kill()

    plans = [json.loads(line) for line in Path(str(fixture) + ".plans").read_text().splitlines()]
    assert len(plans) == 2 and plans[0] == plans[1], plans
    m = f"master{master.address.rsplit('.', 1)[1]}"
    assert len(workers) == 2
    rows = serve.rows("SELECT name, status, attempts FROM steps ORDER BY idx")
    assert [r[0] for r in rows] == [*INSTANTIATE_HEAD, f"init-master-{m}", *INSTANTIATE_TAIL]
    # One job, resumed: load-params ran once, before the kill; nothing failed.
    assert serve.rows("SELECT count(*) FROM jobs") == [(1,)]
    assert rows[:2] == [("confirm", "done", 1), ("load-params", "done", 1)]
    assert all(status in ("done", "skipped") for _, status, _ in rows)


def _kubeadm(bed: Any, verb: str) -> list[dict[str, Any]]:
    return [
        c
        for c in bed.calls()
        if c["tool"] == "kubeadm" and c["argv"][:1] == [verb] and c["argv"][1:2] != ["phase"]
    ]
