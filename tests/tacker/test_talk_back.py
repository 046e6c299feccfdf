"""Talking back to the real Tacker 16.0.0: subscriptions, write-back with its echo, 409s,
the reconciler, wrong Keystone credentials. ``lccn-subscriber`` runs in-process here (its
store is read directly); Tacker's synchronous helpers run in threads so the service's
loop keeps answering Tacker's callbacks."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from subscriber.config import (
    DatabaseSettings,
    DispatchSettings,
    HandlerSettings,
    HttpSettings,
    Settings,
    TackerSettings,
)
from subscriber.service import Service
from subscriber.store import EventRow
from subscriber.tacker import TackerClient, ensure_subscription
from tests.conftest import Started, free_port, wait_until
from tests.tacker import writeback_handler as wb
from tests.tacker.helpers import k8s_params
from tests.testbed import tacker_bed as tb
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import (
    NETWORK_ID,
    CallbackRecorder,
    instantiate_request,
    unique_name,
)
from tests.testbed.tacker_api import TackerClient as SyncTacker

pytestmark = pytest.mark.tacker


def tacker_settings(bed: tb.BedState, **kw: Any) -> TackerSettings:
    quick = {**tb.QUICK_RETRIES, "op_poll_interval": 0.2}
    return TackerSettings(**bed.tacker_section(**{**quick, **kw}))


def service_settings(db_url: str, tacker: TackerSettings) -> Settings:
    return Settings(
        http=HttpSettings(host="127.0.0.1", port=free_port()),
        database=DatabaseSettings(url=db_url),
        dispatch=DispatchSettings(rescan_interval=0.5, backoff_initial=0.2, max_attempts=3),
        handlers=HandlerSettings(modules=("tests.tacker.writeback_handler",)),
        tacker=tacker,
    )


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Callable[[TackerSettings], Any]]:
    """Start Services on this test's database with the given Tacker settings; at teardown
    stop them and delete the subscriptions they made."""
    async with Started(lambda tacker: Service(service_settings(db_url, tacker))) as start:
        yield start
        subs = [s.subscriptions.subscription_id for s in start.items if s.subscriptions]
    if start.items:
        async with TackerClient(start.items[0].settings.tacker) as client:
            for sub in subs:
                if sub:
                    await client.delete_subscription(sub)


async def events_of(svc: Service, inst: str) -> list[EventRow]:
    return await svc.store.events.list(vnf_instance_id=inst)


async def instantiate(tacker: SyncTacker, bed: tb.BedState, sim: SimProcess) -> tuple[str, str]:
    """Create + INSTANTIATE (in a thread); (instance id, op-occ id)."""
    assert bed.vnfd_id

    def run() -> tuple[str, str]:
        inst = tacker.create(bed.vnfd_id or "", unique_name("talkback"))
        occ = tacker.run_op(
            inst,
            "instantiate",
            instantiate_request(sim.vim_connection_info(), k8s_params("simple"), NETWORK_ID),
        )
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        return inst, str(occ["id"])

    return await asyncio.to_thread(run)


async def terminate(tacker: SyncTacker, inst: str) -> None:
    def run() -> None:
        tacker.run_op(inst, "terminate", {"terminationType": "FORCEFUL"})
        tacker.delete(inst)

    await asyncio.to_thread(run)


async def test_subscribe_twice_makes_one_subscription_even_while_jobs_are_busy(
    bed: tb.BedState, services: Any
) -> None:
    svc: Service = await services(tacker_settings(bed))
    assert svc.tacker is not None
    # Keep the only job slot busy: Tacker's GET test must still be answered.
    inst = f"busy-{uuid.uuid4()}"
    from tests.factories import op_occ

    async with aiohttp.ClientSession() as http:
        body = op_occ(instance=inst, operation="SCALE", state="COMPLETED")
        url = f"http://127.0.0.1:{svc.port}{svc.settings.http.path}"
        async with http.post(url, json=body) as resp:
            assert resp.status == 204
    await wait_until(
        lambda: _statuses(svc, inst, {"running"}), timeout=10, what="the blocking job to run"
    )
    try:
        first = await ensure_subscription(svc.tacker, svc.settings, svc.store.credentials)
        second = await ensure_subscription(svc.tacker, svc.settings, svc.store.credentials)
        assert first.created and not second.created
        assert second.subscription["id"] == first.subscription["id"]
        ours = [
            s
            for s in await svc.tacker.list_subscriptions()
            if s["callbackUri"] == f"http://127.0.0.1:{svc.port}/lccn/notifications"
        ]
        assert [s["id"] for s in ours] == [first.subscription["id"]]
        # The job was busy the whole time.
        assert await _statuses(svc, inst, {"running"})
    finally:
        wb.BUSY.setdefault(inst, asyncio.Event()).set()
        await svc.tacker.delete_subscription(str(first.subscription["id"]))


async def _statuses(svc: Service, inst: str, wanted: set[str]) -> bool:
    return any(e.status in wanted for e in await events_of(svc, inst))


async def test_write_back_lands_and_its_echo_runs_no_handler(
    bed: tb.BedState, sim: SimProcess, tacker: SyncTacker, recorder: CallbackRecorder, services: Any
) -> None:
    svc: Service = await services(tacker_settings(bed, subscribe_on_start=True))
    assert svc.subscriptions is not None
    await asyncio.wait_for(svc.subscriptions.subscribed.wait(), 30)
    inst, occ = await instantiate(tacker, bed, sim)

    async def completed_done() -> EventRow | None:
        for e in await events_of(svc, inst):
            if e.vnf_lcm_op_occ_id == occ and e.operation_state == "COMPLETED":
                assert e.status not in ("failed", "retry"), e.status_detail
                return e if e.status == "done" else None
        return None

    event = await wait_until(completed_done, what="the write-back job")
    [job] = await svc.store.jobs.for_event(event.id)
    [step] = await svc.store.jobs.steps(job.id)
    modify_occ = step.result_json()["modify_info"]

    shown = await asyncio.to_thread(tacker.show, inst)
    entry = shown["vimConnectionInfo"]["k8s"]
    assert entry["vimType"] == "ETSINFV.KUBERNETES.V_1"
    assert entry["interfaceInfo"]["endpoint"] == wb.ACCESS.endpoint
    assert "vim1" in shown["vimConnectionInfo"]  # the instance's own VIM is untouched

    # Tacker's MODIFY_INFO notifications (PROCESSING/START, COMPLETED/RESULT) are our echo.
    async def echoes() -> list[EventRow] | None:
        mine = [e for e in await events_of(svc, inst) if e.vnf_lcm_op_occ_id == modify_occ]
        states = {(e.operation_state, e.status) for e in mine}
        return mine if states == {("PROCESSING", "echo"), ("COMPLETED", "echo")} else None

    stored = await wait_until(echoes, what="the echo to be stored as echo")
    assert modify_occ not in wb.MODIFY_INFO_SEEN
    assert await svc.store.tacker.is_own(modify_occ)
    # Tacker sent the bearer token in clear in changedInfo; it is not stored.
    sent = recorder.wait(vnfLcmOpOccId=modify_occ, operationState="COMPLETED")
    assert wb.BEARER in json.dumps(sent)
    assert all(wb.BEARER not in e.body for e in await events_of(svc, inst))
    assert all(not e.status_detail or wb.BEARER not in e.status_detail for e in stored)
    text = svc.metrics.render().decode()
    assert 'lccn_events_skipped_total{reason="echo"} 2.0' in text

    # An operator's MODIFY_INFO is not ours: it reaches the handler.
    operator_occ = await asyncio.to_thread(
        tacker.modify, inst, {"vnfInstanceDescription": "by an operator"}
    )
    await asyncio.to_thread(tacker.wait_op, operator_occ)
    await wait_until(
        lambda: _true(operator_occ in wb.MODIFY_INFO_SEEN), what="the operator's MODIFY_INFO"
    )
    await terminate(tacker, inst)


async def _true(value: bool) -> bool:
    return value


async def test_patch_while_tacker_holds_the_lock_lands_after_backoff(
    bed: tb.BedState, sim: SimProcess, tacker: SyncTacker
) -> None:
    inst, _ = await instantiate(tacker, bed, sim)
    # A SCALE_OUT holds the instance lock while Heat updates the stack; Heat is
    # made to take 3 s over it, so the PATCH is sure to meet real 409s first.
    with sim.control.fault(
        service="orchestration",
        method="PATCH",
        path=r"/stacks/vnf-[^/]+/[^/]+$",
        status=None,
        delay=3.0,
        times=1,
    ):
        scale = await asyncio.to_thread(
            tacker.start_op, inst, "scale", {"type": "SCALE_OUT", "aspectId": "workerNode_scale"}
        )

        # The conductor takes the lock when it picks the op up (STARTING can
        # precede that); by PROCESSING it holds it for the delayed Heat update.
        async def processing() -> bool:
            occ = await asyncio.to_thread(tacker.op_occ, scale)
            return occ["operationState"] in ("PROCESSING", "COMPLETED")

        await wait_until(processing, what="the SCALE_OUT to reach PROCESSING")
        retried: list[int] = []
        async with TackerClient(tacker_settings(bed), on_retry=retried.append) as client:
            modify_occ = await client.write_back(inst, wb.ACCESS)
            assert 409 in retried, retried
    assert (await asyncio.to_thread(tacker.op_occ, scale))["operationState"] == "COMPLETED"
    assert (await asyncio.to_thread(tacker.op_occ, modify_occ))["operationState"] == "COMPLETED"
    shown = await asyncio.to_thread(tacker.show, inst)
    assert shown["vimConnectionInfo"]["k8s"]["interfaceInfo"]["endpoint"] == wb.ACCESS.endpoint
    await terminate(tacker, inst)


async def test_reconciler_recovers_transitions_sent_while_serve_was_down(
    bed: tb.BedState, sim: SimProcess, tacker: SyncTacker, recorder: CallbackRecorder, services: Any
) -> None:
    settings = tacker_settings(bed, subscribe_on_start=True, reconcile_interval=0.3)
    first: Service = await services(settings)
    assert first.subscriptions is not None and first.reconciler is not None
    await asyncio.wait_for(first.subscriptions.subscribed.wait(), 30)
    await wait_until(lambda: _true(first.reconciler.runs > 0 if first.reconciler else False))
    await first.stop()  # the subscription stays: Tacker's sends to it are lost

    inst, occ = await instantiate(tacker, bed, sim)
    expected = {("STARTING", "START"), ("PROCESSING", "RESULT"), ("COMPLETED", "RESULT")}

    async def all_sent() -> set[tuple[str, str]] | None:
        # Tacker sends each notification from its own thread: COMPLETED can land a
        # moment after the op-occ shows COMPLETED.
        bodies = await asyncio.to_thread(recorder.bodies, vnfLcmOpOccId=occ)
        got = {(b["operationState"], b["notificationStatus"]) for b in bodies}
        return got if got == expected else None

    sent = await wait_until(all_sent, timeout=30, what="Tacker to send the three transitions")

    second: Service = await services(tacker_settings(bed, reconcile_interval=0.3))

    async def recovered() -> list[EventRow] | None:
        mine = [e for e in await events_of(second, inst) if e.vnf_lcm_op_occ_id == occ]
        got = {(e.operation_state, e.notification_status) for e in mine}
        done = any(e.operation_state == "COMPLETED" and e.status == "done" for e in mine)
        return mine if got == sent and done else None

    mine = await wait_until(recovered, what="the reconciler to recover the INSTANTIATE")
    assert {e.source for e in mine} == {"reconcile"}
    # The current state ran (the write-back handler); the implied earlier ones are history.
    assert {e.operation_state: e.status for e in mine} == {
        "STARTING": "stale",
        "PROCESSING": "stale",
        "COMPLETED": "done",
    }
    # The write-back's MODIFY_INFO, also reconciled (no subscription now), is our echo.
    shown = await asyncio.to_thread(tacker.show, inst)
    assert "k8s" in shown["vimConnectionInfo"]

    async def echo_reconciled() -> bool:
        own = await second.store.tacker.own_op_occs(inst)
        return bool(own) and any(
            e.vnf_lcm_op_occ_id in own and e.operation_state == "COMPLETED" and e.status == "echo"
            for e in await events_of(second, inst)
        )

    await wait_until(echo_reconciled, what="the reconciled MODIFY_INFO to be an echo")
    await terminate(tacker, inst)


async def test_wrong_keystone_credentials_fail_the_step_and_write_nothing(
    bed: tb.BedState, sim: SimProcess, tacker: SyncTacker, services: Any
) -> None:
    bad = "not-the-password-" + uuid.uuid4().hex[:6]
    settings = tacker_settings(
        bed,
        auth_type="password",
        auth_url=sim.auth_url,
        username=sim.config.username,
        password=bad,
        project_name=sim.config.project_name,
    )
    svc: Service = await services(settings)
    inst = await asyncio.to_thread(
        tacker.create, bed.vnfd_id or "", unique_name("talkback-badauth")
    )
    from tests.factories import op_occ

    async with aiohttp.ClientSession() as http:
        body = op_occ(instance=inst, operation="INSTANTIATE", state="COMPLETED")
        url = f"http://127.0.0.1:{svc.port}{svc.settings.http.path}"
        async with http.post(url, json=body) as resp:
            assert resp.status == 204

    async def failed() -> EventRow | None:
        return next((e for e in await events_of(svc, inst) if e.status == "failed"), None)

    event = await wait_until(failed, timeout=30, what="the job to fail")
    [job] = await svc.store.jobs.for_event(event.id)
    assert job.attempts == 1 and job.error_class == "tacker-auth"  # permanent: not retried
    assert job.last_error is not None and "\n" not in job.last_error
    assert "Keystone refused the credentials" in job.last_error and bad not in job.last_error
    assert await svc.store.tacker.own_op_occs(inst) == []
    assert await svc.store.tacker.open_intents(inst, 0) == 0
    shown = await asyncio.to_thread(tacker.show, inst)
    assert not shown.get("vimConnectionInfo")
    await asyncio.to_thread(tacker.delete, inst)
