"""The drain hook's job on real sshd hosts (stand-in kubectl, etcdctl): a SCALE_IN
worker and a healed HA master are drained and forgotten while their VMs still run,
and the COMPLETED handler then converges with nothing left to retire in the cluster.

The request is posted the way the package's script posts it; Tacker is the in-memory
fake (its VNFCs change only when the test says Tacker deleted or rebuilt a VM).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from subscriber.config import HookSettings, SshSettings
from tests.cluster_fakes import lcm_op_occ, rebuild_vnfc, remove_vnfc, server_at
from tests.ssh.cluster import Cluster, name_of, start

from .conftest import testhosts

pytestmark = [pytest.mark.ssh, pytest.mark.asyncio, pytest.mark.usefixtures("restore_hostnames")]

TOKEN = "ssh-tier-hook-token-31c4"
HOOKS = HookSettings(token=TOKEN)


async def drain(c: Cluster, operation: str, occ: str, servers: list[str]) -> dict[str, Any]:
    """POST the request as the hook script does, then poll for the answer."""
    url = f"http://127.0.0.1:{c.svc.port}{HOOKS.path}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    point = f"{operation.lower()}_start"
    body = {"point": point, "vnfInstanceId": c.inst, "vnfLcmOpOccId": occ}
    async with aiohttp.ClientSession(headers=auth) as http:
        async with http.post(url, json={**body, "servers": servers}) as r:
            assert r.status == 202, await r.text()
        async with asyncio.timeout(180):
            while True:
                async with http.get(f"{url}/{occ}/{point}") as r:
                    answer: dict[str, Any] = await r.json()
                if answer["status"] in ("done", "failed"):
                    c.sent += 1  # the hook's PROCESSING event
                    return answer
                await asyncio.sleep(0.1)


def kubectl_writes(bed: Any, verb: str, node: str) -> list[dict[str, Any]]:
    return [
        x
        for x in bed.calls()
        if x["tool"] == "kubectl" and verb in x["argv"] and node in x["argv"] and x["rc"] == 0
    ]


async def test_scale_in_worker_is_drained_before_its_vm_goes(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    master, w1, w2 = bed.hosts[0:3]
    c = await start(bed, ssh_settings, tmp_path, [master], [w1, w2], hooks=HOOKS)
    try:
        leaving = name_of(w2, "worker")
        occ = lcm_op_occ(c.tacker, c.inst, "SCALE")
        answer = await drain(
            c, "SCALE", occ, [server_at(c.tacker, c.openstack, c.inst, w2.address)]
        )
        assert answer["status"] == "done" and answer["nodes"] == [leaving], answer
        assert kubectl_writes(bed, "drain", leaving)  # evicted first ...
        assert leaving not in bed.state()["nodes"]  # ... then forgotten, its VM still there
        assert w1.name != leaving and name_of(w1, "worker") in bed.state()["nodes"]

        # Tacker deletes the VM and notifies COMPLETED: the cluster already agrees.
        remove_vnfc(c.tacker, c.openstack, c.inst, w2.address)
        testhosts.wipe_host(bed, w2)
        event = await c.notify("SCALE", occ)
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        assert leaving not in await c.check_agrees()
    finally:
        await c.svc.stop()


async def test_healed_master_leaves_etcd_and_haproxy_before_its_vm_is_rebuilt(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    masters, worker = bed.hosts[0:3], bed.hosts[3]
    c = await start(bed, ssh_settings, tmp_path, masters, [worker], hooks=HOOKS)
    try:
        target = masters[1]
        healed = name_of(target, "master")
        occ = lcm_op_occ(c.tacker, c.inst, "HEAL")
        server = server_at(c.tacker, c.openstack, c.inst, target.address)
        answer = await drain(c, "HEAL", occ, [server])
        assert answer["status"] == "done", answer
        assert healed not in {m["name"] for m in bed.state()["etcd"].values()}
        for m in (masters[0], masters[2]):
            cfg = next((Path(bed.root) / "hosts" / m.name / "fs").rglob("haproxy.cfg"))
            assert f"server  {healed} " not in cfg.read_text()

        rebuild_vnfc(c.tacker, c.openstack, c.inst, target.address)
        testhosts.wipe_host(bed, target)
        event = await c.notify("HEAL", occ)
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        assert healed in await c.check_agrees()
        for m in masters:
            cfg = next((Path(bed.root) / "hosts" / m.name / "fs").rglob("haproxy.cfg"))
            assert f"server  {healed} {target.address}:6443 check" in cfg.read_text()
    finally:
        await c.svc.stop()


async def test_drain_of_the_only_master_fails_clearly(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    master, worker = bed.hosts[0:2]
    c = await start(bed, ssh_settings, tmp_path, [master], [worker], hooks=HOOKS)
    try:
        occ = lcm_op_occ(c.tacker, c.inst, "HEAL")
        server = server_at(c.tacker, c.openstack, c.inst, master.address)
        answer = await drain(c, "HEAL", occ, [server])
        assert answer["status"] == "failed"
        assert "heal the whole VNF instead" in answer["detail"]
        assert name_of(master, "master") in bed.state()["nodes"]  # nothing was touched
    finally:
        await c.svc.stop()
