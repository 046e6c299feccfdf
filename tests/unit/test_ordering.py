"""Lanes: per-instance order, dedup of resends, stale transitions, parallel instances."""

from __future__ import annotations

import asyncio
import random

import aiohttp
import pytest

from subscriber.service import Service
from tests.conftest import ServiceFactory, callback_url, wait_settled
from tests.factories import op_occ, uid
from tests.recorders import Recorder, registry_with

pytestmark = pytest.mark.asyncio

SEQUENCE = ("STARTING", "PROCESSING", "COMPLETED")


async def _send(http: aiohttp.ClientSession, svc: Service, body: dict[str, object]) -> int:
    async with http.post(callback_url(svc), json=body) as resp:
        return resp.status


async def test_shuffled_concurrent_resends_run_once_each_in_order(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    recorder = Recorder(delay=0.01)
    svc = await start_service(routing=registry_with(recorder), reorder_window=0.5)
    instances = [uid() for _ in range(6)]
    bodies = []
    expected: dict[str, list[tuple[str, str]]] = {}
    for inst in instances:
        for _ in range(2):  # two op-occs per instance, one after the other
            occ = uid()
            for state in SEQUENCE:
                body = op_occ(instance=inst, op_occ_id=occ, state=state)
                bodies += [body, dict(body, id=uid())]  # each transition sent twice, new ids
            expected.setdefault(inst, []).extend((occ, s) for s in SEQUENCE)
    # Tacker's second op-occ cannot start before the first completes: send in
    # waves per op-occ, but shuffle everything within a wave.
    waves: list[list[dict[str, object]]] = [[], []]
    for inst in instances:
        per_inst = [b for b in bodies if b["vnfInstanceId"] == inst]
        first_occ = per_inst[0]["vnfLcmOpOccId"]
        for b in per_inst:
            waves[0 if b["vnfLcmOpOccId"] == first_occ else 1].append(b)
    for wave in waves:
        random.shuffle(wave)
        statuses = await asyncio.gather(*(_send(http, svc, b) for b in wave))
        assert set(statuses) == {204}
        await recorder.wait_for(
            sum(len(v) for v in expected.values()) // 2 * (waves.index(wave) + 1)
        )

    events = await wait_settled(svc)
    assert len(events) == len(instances) * 2 * len(SEQUENCE)  # one per transition
    assert {e.status for e in events} == {"done"}
    for inst in instances:
        ran = [(occ, state) for i, occ, state in recorder.runs if i == inst]
        assert ran == expected[inst]
    assert recorder.overlaps == 0
    assert recorder.max_parallel > 1  # different instances did run side by side


async def test_late_older_transition_is_stale_not_run(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    recorder = Recorder()
    svc = await start_service(routing=registry_with(recorder), reorder_window=0.05)
    inst, occ = uid(), uid()
    assert await _send(http, svc, op_occ(instance=inst, op_occ_id=occ, state="STARTING")) == 204
    assert await _send(http, svc, op_occ(instance=inst, op_occ_id=occ, state="COMPLETED")) == 204
    await recorder.wait_for(2)
    # PROCESSING arrives long after COMPLETED was handled: recorded, skipped.
    assert await _send(http, svc, op_occ(instance=inst, op_occ_id=occ, state="PROCESSING")) == 204
    async with asyncio.timeout(10):
        while True:
            statuses = {e.operation_state: e.status for e in await svc.store.events.list()}
            if statuses.get("PROCESSING") not in (None, "pending", "running"):
                break
            await asyncio.sleep(0.02)
    assert statuses == {"STARTING": "done", "COMPLETED": "done", "PROCESSING": "stale"}
    assert [s for _, _, s in recorder.runs] == ["STARTING", "COMPLETED"]


async def test_reorder_window_turns_jitter_into_order_not_skips(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    recorder = Recorder()
    svc = await start_service(routing=registry_with(recorder), reorder_window=0.4)
    inst, occ = uid(), uid()
    # COMPLETED first, PROCESSING 100 ms later (inside the window), STARTING never.
    assert await _send(http, svc, op_occ(instance=inst, op_occ_id=occ, state="COMPLETED")) == 204
    await asyncio.sleep(0.1)
    assert await _send(http, svc, op_occ(instance=inst, op_occ_id=occ, state="PROCESSING")) == 204
    await recorder.wait_for(2)
    assert [s for _, _, s in recorder.runs] == ["PROCESSING", "COMPLETED"]


async def test_identifier_notifications_are_stored_as_ignored(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    from tests.factories import identifier

    svc = await start_service()
    assert await _send(http, svc, identifier("Creation")) == 204
    (event,) = await wait_settled(svc, 1)
    assert event.status == "ignored"


async def test_a_backlog_of_lanes_is_worked_off_oldest_first(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    # One lane at a time: the others wait, and must be taken in the order their
    # events came, whatever their instance ids (they sort the other way round here).
    recorder = Recorder(delay=0.05)
    svc = await start_service(routing=registry_with(recorder), max_parallel_lanes=1)
    lanes = [f"{c}0000000-0000-4000-8000-000000000000" for c in "fedcba9876"]
    for lane in lanes:
        assert await _send(http, svc, op_occ(instance=lane, state="STARTING")) == 204
    await recorder.wait_for(len(lanes))
    assert [inst for inst, _, _ in recorder.runs] == lanes
    await wait_settled(svc, len(lanes))


async def test_parallel_lanes_are_bounded(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    recorder = Recorder(delay=0.1)
    svc = await start_service(routing=registry_with(recorder), max_parallel_lanes=3)
    bodies = [op_occ(state="STARTING") for _ in range(9)]
    await asyncio.gather(*(_send(http, svc, b) for b in bodies))
    await recorder.wait_for(9)
    assert recorder.max_parallel == 3
    await wait_settled(svc, 9)
