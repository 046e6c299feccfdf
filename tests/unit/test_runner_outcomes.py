"""How a job can end besides done, retry and failed: a step that finds nothing to do
ends its job (``EndJob``), and a step that finds Tacker contradicting the notification
rejects its event (``EventRejected``): stored with the reason, never run on, never replayed."""

from __future__ import annotations

from collections import Counter
from typing import Any

import aiohttp
import pytest

from schemas import Notification
from subscriber.errors import EndJob, EventRejected
from subscriber.kernel import JobContext, Plan, RoutingTable, Step
from subscriber.replay import preview
from subscriber.store import EventStatus, JobStatus, StepStatus
from subscriber.store.replays import REPLAYABLE
from tests.conftest import ServiceFactory, callback_url, wait_settled
from tests.factories import op_occ

pytestmark = pytest.mark.asyncio


class Ends:
    """``first`` raises what it is given; ``second`` counts its runs."""

    name = "ends"

    def __init__(self, outcome: BaseException) -> None:
        self.outcome = outcome
        self.calls: Counter[str] = Counter()

    def plan(self, notification: Notification) -> Plan:
        async def first(ctx: JobContext) -> Any:
            self.calls["first"] += 1
            raise self.outcome

        async def second(ctx: JobContext) -> Any:
            self.calls["second"] += 1
            return {"ran": True}

        return Plan((Step("first", first), Step("second", second)))


def _table(handler: Any) -> RoutingTable:
    table = RoutingTable()
    table.register(handler)
    return table


async def test_end_job_ends_the_job_done_without_the_later_steps(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    handler = Ends(EndJob("nothing was asked", {"servers": []}))
    svc = await start_service(routing=_table(handler))
    async with http.post(callback_url(svc), json=op_occ(state="COMPLETED")) as resp:
        assert resp.status == 204
    (event,) = await wait_settled(svc, 1)
    job = await svc.store.jobs.current(event.id)
    steps = await svc.store.jobs.steps(job.id)
    assert event.status == EventStatus.DONE and job.status == JobStatus.DONE
    assert [(s.name, s.status) for s in steps] == [("first", StepStatus.SKIPPED)]
    assert steps[0].result_json() == {"servers": []}
    assert handler.calls == Counter({"first": 1})


async def test_a_rejected_event_is_stored_with_its_reason_and_never_replayed(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    handler = Ends(EventRejected("Tacker says op-occ o1 belongs to VNF instance other"))
    svc = await start_service(routing=_table(handler), backoff_initial=0.01, max_attempts=5)
    async with http.post(callback_url(svc), json=op_occ(state="COMPLETED")) as resp:
        assert resp.status == 204
    (event,) = await wait_settled(svc, 1)
    job = await svc.store.jobs.current(event.id)
    assert event.status == EventStatus.REJECTED
    assert "belongs to VNF instance other" in (event.status_detail or "")
    assert job.status == JobStatus.FAILED and job.error_class == "rejected"
    assert job.attempts == 1  # no retry
    assert handler.calls == Counter({"first": 1})
    assert EventStatus.REJECTED not in REPLAYABLE
    assert await svc.store.replays.request([event.id], "anew") == []
    (seen,) = await preview(svc.store, svc.routing, [event], "anew")
    assert not seen.replayable and "Tacker contradicted the notification" in (seen.reason or "")
    async with http.get(f"http://127.0.0.1:{svc.port}/metrics") as resp:
        text = await resp.text()
    assert 'lccn_jobs_total{mode="live",outcome="rejected"} 1.0' in text
