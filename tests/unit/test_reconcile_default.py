"""The reconciler is on whenever a Tacker is configured (Tacker v2 sends each notification
once), and it never reads back before the moment ``serve`` first ran against its store."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from subscriber.config import TackerSettings
from subscriber.service import Service
from subscriber.store import Store
from subscriber.tacker import TackerClient
from subscriber.tacker.reconciler import FLOOR_KEY, WATERMARK_KEY, Reconciler
from tests.conftest import make_settings
from tests.unit.scripted_tacker import ScriptedTacker

pytestmark = pytest.mark.asyncio


def stamp(seconds_ago: float) -> str:
    at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def occ(entered: str) -> dict[str, str]:
    return {
        "id": f"occ-{entered}",
        "vnfInstanceId": "inst-1",
        "operation": "INSTANTIATE",
        "operationState": "COMPLETED",
        "stateEnteredTime": entered,
    }


async def test_on_by_default_with_a_tacker(db_url: str) -> None:
    assert TackerSettings().reconcile_interval == 60.0
    with_tacker = make_settings(db_url).model_copy(
        update={"tacker": TackerSettings(endpoint="http://127.0.0.1:9")}
    )
    assert Service(with_tacker).reconciler is not None
    assert Service(make_settings(db_url)).reconciler is None  # no Tacker: nothing to poll
    off = with_tacker.model_copy(
        update={"tacker": TackerSettings(endpoint="http://127.0.0.1:9", reconcile_interval=0)}
    )
    assert Service(off).reconciler is None


async def test_the_first_pass_reads_nothing_from_before_the_first_start(
    fake: ScriptedTacker, store: Store
) -> None:
    before, after = occ(stamp(30)), occ(stamp(-1))  # one within the overlap, one to come
    fake.on("GET", "/vnflcm/v2/vnf_lcm_op_occs", (200, [before, after]))
    settings = TackerSettings(endpoint=fake.url, reconcile_overlap=120, retry_attempts=1)
    async with TackerClient(settings) as client:
        reconciler = Reconciler(store, client, settings)
        async with reconciler:
            floor = await store.tacker.get_value(FLOOR_KEY)
            assert floor and floor.startswith(str(await store.tacker.get_value(WATERMARK_KEY))[:19])
            await reconciler.reconcile_once()
    ids = {e.vnf_lcm_op_occ_id for e in await store.events.list()}
    assert ids == {after["id"]}


async def test_what_ended_in_the_second_of_the_first_start_is_not_replayed(
    fake: ScriptedTacker, store: Store
) -> None:
    """Tacker's ``stateEnteredTime`` has microseconds: an op-occ that ended a moment
    before the first start, within the same second, is history too (CI met one)."""
    while dt.datetime.now(dt.UTC).microsecond > 500_000:  # the start lands in this second
        await asyncio.sleep(0.02)
    ended = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    fake.on("GET", "/vnflcm/v2/vnf_lcm_op_occs", (200, [occ(ended)]))
    settings = TackerSettings(endpoint=fake.url, reconcile_overlap=120, retry_attempts=1)
    async with TackerClient(settings) as client:
        reconciler = Reconciler(store, client, settings)
        async with reconciler:
            await reconciler.reconcile_once()
    assert await store.events.list() == []


async def test_a_reconciled_transition_starts_a_trace_its_job_continues(
    fake: ScriptedTacker, store: Store, spans: Any
) -> None:
    """A missed COMPLETED found by the reconciler is run like a callback's: its event
    carries the trace its reconcile pass began (tracing on)."""
    missed = occ(stamp(-1))
    fake.on("GET", "/vnflcm/v2/vnf_lcm_op_occs", (200, [missed]))
    settings = TackerSettings(endpoint=fake.url, reconcile_overlap=120, retry_attempts=1)
    async with TackerClient(settings) as client:
        reconciler = Reconciler(store, client, settings)
        async with reconciler:
            await reconciler.reconcile_once()
    # The COMPLETED to run, and the STARTING and PROCESSING it implies (stored, never run).
    events = {e.operation_state: e for e in await store.events.list()}
    event = events["COMPLETED"]
    assert event.source == "reconcile" and event.traceparent is not None
    assert events["STARTING"].traceparent is None
    # The service's own first pass at start, and this one: the later finds a copy.
    ingests = [s for s in spans.get_finished_spans() if s.name == "ingest"]
    assert {s.attributes["lccn.source"] for s in ingests} == {"reconcile"}
    assert {s.attributes["lccn.vnf_lcm_op_occ_id"] for s in ingests} == {missed["id"]}
    assert event.trace_id in {f"{s.context.trace_id:032x}" for s in ingests}
