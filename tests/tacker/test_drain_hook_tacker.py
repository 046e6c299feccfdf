"""The drain hook with the real Tacker 16.0.0: Tacker runs the package's ``lccn_hook.py``
as its v2 management-driver ``scale_start``/``heal_start`` script, the script asks our
Service to drain, and Tacker deletes the VM only after the answer. (The package wires
the other points too; here their transitions only reach the ``log`` handler.)

The Service runs in process, subscribed to Tacker (so Tacker's own PROCESSING
notification races the hook's request, as in production), with the drain job's cluster
steps replaced by a recorder that looks, at drain time, whether the server still exists
in the simulated cloud. The cluster steps run against real hosts in ``tests/ssh``.
Tacker's synchronous client runs in threads: the conductor blocks on our answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from handlers.job import ClusterJob
from handlers.log import LogHandler
from handlers.results import DrainServers, Leaving
from handlers.steps import drain_request
from schemas import Notification
from subscriber.config import ClusterSettings, HookSettings
from subscriber.errors import PermanentStepError
from subscriber.kernel import JobContext, Plan, RoutingTable, Step
from subscriber.service import Service
from tests.conftest import callback_url, make_settings
from tests.tacker.helpers import k8s_params
from tests.testbed import tacker_bed as tb
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import (
    NETWORK_ID,
    TackerClient,
    instantiate_request,
    unique_name,
)

pytestmark = [pytest.mark.tacker, pytest.mark.asyncio, pytest.mark.timeout(600)]

TOKEN = "tacker-hook-token-7d1e0b"


class SimWatchingDrain:
    """The drain plan; its cluster steps replaced by a record of (servers, still there)."""

    name = "sim-watching-drain"  # found by its route, not by this name

    def __init__(self, sim: SimProcess) -> None:
        self.sim = sim
        self.drained: list[tuple[list[str], bool]] = []
        self.fail = False

    def plan(self, notification: Notification) -> Plan:
        job = ClusterJob(ClusterSettings(), notification)

        async def select(ctx: JobContext) -> Leaving:
            servers = list(ctx.result(DrainServers).servers)
            ports = await asyncio.to_thread(self.sim.control.state)
            alive = {p["device_id"] for p in ports["ports"] if p["device_id"]}
            self.drained.append((servers, set(servers) <= alive))
            if self.fail:
                raise PermanentStepError("worker drain refused by a PodDisruptionBudget")
            return Leaving(nodes=tuple(servers))

        selecting = Step(Leaving.step, select, needs=(DrainServers,), makes=Leaving)
        return Plan((drain_request(job), selecting))


@pytest.fixture
async def hooked(
    db_url: str, bed: tb.BedState, tacker: TackerClient, sim: SimProcess, tmp_path: Path
) -> AsyncIterator[tuple[Service, SimWatchingDrain]]:
    handler = SimWatchingDrain(sim)
    reg = RoutingTable()
    for op in ("SCALE", "HEAL"):
        reg.register(handler, operation=op, state="PROCESSING")
    reg.register(LogHandler())  # as serve's routing: every other transition is recorded
    settings = make_settings(db_url).model_copy(update={"hooks": HookSettings(token=TOKEN)})
    svc = Service(settings, routing=reg)
    await svc.start()
    token_file = tmp_path / "hook-token"
    token_file.write_text(TOKEN)
    bed.hook_config.write_text(
        json.dumps(
            {
                "url": f"http://127.0.0.1:{svc.port}{settings.hooks.path}",
                "token_file": str(token_file),
                "timeout": 120,
                "poll_interval": 0.3,
            }
        )
    )
    sub = await asyncio.to_thread(tacker.subscribe, callback_url(svc))
    try:
        yield svc, handler
    finally:
        bed.hook_config.unlink(missing_ok=True)  # other tests' operations run no hook
        await asyncio.to_thread(tacker.unsubscribe, sub)
        await svc.stop()


async def op(tacker: TackerClient, inst: str, task: str, body: dict[str, Any]) -> dict[str, Any]:
    return await asyncio.to_thread(tacker.run_op, inst, task, body)


async def instantiate(tacker: TackerClient, bed: tb.BedState, sim: SimProcess) -> str:
    assert bed.vnfd_id
    inst = await asyncio.to_thread(tacker.create, bed.vnfd_id, unique_name("k8s-hook"))
    occ = await op(
        tacker,
        inst,
        "instantiate",
        instantiate_request(sim.vim_connection_info(), k8s_params("simple"), NETWORK_ID),
    )
    assert occ["operationState"] == "COMPLETED", occ.get("error")
    return inst


async def workers(tacker: TackerClient, inst: str) -> list[dict[str, Any]]:
    shown = await asyncio.to_thread(tacker.show, inst)
    return [
        v for v in shown["instantiatedVnfInfo"]["vnfcResourceInfo"] if v["vduId"] == "workerNode"
    ]


async def test_scale_in_and_heal_drain_before_tacker_deletes(
    hooked: tuple[Service, SimWatchingDrain],
    tacker: TackerClient,
    bed: tb.BedState,
    sim: SimProcess,
) -> None:
    svc, handler = hooked
    inst = await instantiate(tacker, bed, sim)
    scale = {"aspectId": "workerNode_scale"}

    out = await op(tacker, inst, "scale", {**scale, "type": "SCALE_OUT"})
    assert out["operationState"] == "COMPLETED", out.get("error")
    assert handler.drained == []  # SCALE_OUT: the script asks for nothing
    newest = (await workers(tacker, inst))[0]["computeResource"]["resourceId"]

    scale_in = await op(tacker, inst, "scale", {**scale, "type": "SCALE_IN"})
    assert scale_in["operationState"] == "COMPLETED", scale_in.get("error")
    # Tacker's choice (the newest worker), drained while its VM still ran, then deleted.
    assert handler.drained == [([newest], True)]
    assert newest not in {w["computeResource"]["resourceId"] for w in await workers(tacker, inst)}
    # Tacker's PROCESSING and the hook's stand-in for it are one transition, one event.
    processing = await svc.store.events.of_op_occ(scale_in["id"], "PROCESSING")
    assert [e.status for e in processing] == ["done"]

    shown = await asyncio.to_thread(tacker.show, inst)
    info = shown["instantiatedVnfInfo"]
    worker = next(v for v in info["vnfcResourceInfo"] if v["vduId"] == "workerNode")
    vnfc = next(i["id"] for i in info["vnfcInfo"] if i["vnfcResourceInfoId"] == worker["id"])
    heal = await op(tacker, inst, "heal", {"vnfcInstanceId": [vnfc]})
    assert heal["operationState"] == "COMPLETED", heal.get("error")
    assert handler.drained[-1] == ([worker["computeResource"]["resourceId"]], True)

    # A drain that fails fails Tacker's operation before any VM is deleted.
    handler.fail = True
    await op(tacker, inst, "scale", {**scale, "type": "SCALE_OUT"})
    before = {w["id"] for w in await workers(tacker, inst)}
    failed = await op(tacker, inst, "scale", {**scale, "type": "SCALE_IN"})
    assert failed["operationState"] == "FAILED_TEMP"
    assert "PodDisruptionBudget" in json.dumps(failed.get("error"))
    assert {w["id"] for w in await workers(tacker, inst)} == before
    assert TOKEN not in json.dumps(failed.get("error"))

    # The cause removed, the operator retries in Tacker: the script asks again, we drain.
    handler.fail = False
    retry = f"/vnflcm/v2/vnf_lcm_op_occs/{failed['id']}/retry"
    status, _, _ = await asyncio.to_thread(tacker.call, "POST", retry)
    assert status == 202
    async with asyncio.timeout(120):
        while (
            state := (await asyncio.to_thread(tacker.op_occ, failed["id"]))["operationState"]
        ) in (
            "FAILED_TEMP",
            "PROCESSING",
        ):
            await asyncio.sleep(0.3)
    assert state == "COMPLETED"
    assert handler.drained[-1][1] is True and len(await workers(tacker, inst)) == len(before) - 1
    done = await op(tacker, inst, "terminate", {"terminationType": "FORCEFUL"})
    assert done["operationState"] == "COMPLETED"
    await asyncio.to_thread(tacker.delete, inst)
