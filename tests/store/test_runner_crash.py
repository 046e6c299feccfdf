"""A process stopped between two writes of a failing job never runs a non-idempotent step twice.

The runner's writes are made to stop the process at a chosen point (a
``BaseException`` that nothing in the runner catches, as a kill -9 would
leave things), then a new runner resumes on the same store, on SQLite and
PostgreSQL. Found by ``tests/chaos/test_sqlite_kill.py`` under load: a start
that resumed a job cut off mid-step wrote the step's ``interrupted`` verdict,
was killed before the job's failure (a second transaction), and the next
start ran the failed step again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from schemas import Notification, parse_notification
from subscriber.config import DispatchSettings
from subscriber.errors import PermanentStepError
from subscriber.kernel import JobContext, Plan, RoutingTable, Step
from subscriber.runner import JobOutcome, Runner
from subscriber.store import EventStatus, JobStatus, NewEvent, StepStatus, Store
from subscriber.store.jobs import StepOutcome
from tests.factories import op_occ, uid

pytestmark = pytest.mark.asyncio


class Killed(BaseException):
    """The process stops here (nothing in the runner catches it)."""


class Apply:
    """``prepare`` (idempotent) -> ``apply`` (not idempotent, counted) -> ``finish``."""

    name = "apply-once"

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.apply: BaseException | None = None  # raised by apply's next run

    def plan(self, notification: Notification) -> Plan:
        async def prepare(ctx: JobContext) -> None:
            self.calls["prepare"] += 1

        async def apply(ctx: JobContext) -> None:
            self.calls["apply"] += 1
            fault, self.apply = self.apply, None
            if fault is not None:
                raise fault

        async def finish(ctx: JobContext) -> None:
            self.calls["finish"] += 1

        return Plan(
            (
                Step("prepare", prepare, idempotent=True),
                Step("apply", apply, idempotent=False),
                Step("finish", finish, idempotent=True),
            )
        )


async def _append(store: Store) -> int:
    raw = json.dumps(op_occ(instance=uid(), state="STARTING")).encode()
    new = NewEvent(source="http", notification=parse_notification(raw), raw=raw)
    return (await store.events.append(new)).event_id


def _runner(store: Store, handler: Apply) -> Runner:
    registry = RoutingTable()
    registry.register(handler)
    return Runner(store, registry, DispatchSettings(backoff_initial=0.01, backoff_max=0.02))


async def _run(store: Store, handler: Apply, event_id: int) -> JobOutcome:
    """One start of the process: run the event as the dispatcher would hand it over."""
    event = await store.events.get(event_id)
    assert event is not None
    return await _runner(store, handler).run(event)


@contextmanager
def killed_at_the_job_outcome(store: Store) -> Iterator[None]:
    """The process stops as it is about to write a job's retry or failure."""
    real = store.jobs.update

    async def update(job_id: int, **kw: Any) -> None:
        if kw["status"] in (JobStatus.RETRY, JobStatus.FAILED):
            raise Killed
        await real(job_id, **kw)

    store.jobs.update = update  # type: ignore[method-assign]
    try:
        yield
    finally:
        store.jobs.update = real  # type: ignore[method-assign]


async def _apply_row(store: Store, event_id: int) -> Any:
    job = await store.jobs.current(event_id)
    assert job is not None
    return job, {s.name: s for s in await store.jobs.steps(job.id)}["apply"]


async def _killed_mid_apply(store: Store) -> tuple[Apply, int]:
    """A new event whose first start is killed in the middle of apply (left ``running``)."""
    handler = Apply()
    event_id = await _append(store)
    handler.apply = Killed()
    with pytest.raises(Killed):
        await _run(store, handler, event_id)
    return handler, event_id


async def test_a_start_killed_after_the_interrupted_verdict_does_not_let_the_next_rerun_it(
    store: Store,
) -> None:
    # Start 1: killed in the middle of apply (its "running" checkpoint is written).
    handler, event_id = await _killed_mid_apply(store)
    # Start 2: finds apply cut off, decides "interrupted", is killed before the job's failure.
    with killed_at_the_job_outcome(store), pytest.raises(Killed):
        await _run(store, handler, event_id)
    _, row = await _apply_row(store, event_id)
    assert row.status == StepStatus.RUNNING  # the verdict went nowhere without the job's
    # Start 3: the verdict again, this time written.
    assert await _run(store, handler, event_id) is JobOutcome.FAILED
    assert handler.calls["apply"] == 1 and handler.calls["finish"] == 0
    job, row = await _apply_row(store, event_id)
    assert (job.status, job.error_class) == (JobStatus.FAILED, "interrupted")
    assert row.status == StepStatus.FAILED and "interrupted" in (row.error or "")
    event = await store.events.get(event_id)
    assert event is not None and event.status == EventStatus.FAILED


async def test_a_failed_step_and_its_jobs_failure_are_one_write(store: Store) -> None:
    # apply fails for good; the process is killed as it writes the job's failure.
    handler = Apply()
    event_id = await _append(store)
    handler.apply = PermanentStepError("the node said no")
    with killed_at_the_job_outcome(store), pytest.raises(Killed):
        await _run(store, handler, event_id)
    job, row = await _apply_row(store, event_id)
    # Neither is written: the step still says it began, the job is still running.
    assert (job.status, row.status) == (JobStatus.RUNNING, StepStatus.RUNNING)
    # The next start cannot know whether apply had its effect: it does not run it again.
    assert await _run(store, handler, event_id) is JobOutcome.FAILED
    assert handler.calls["apply"] == 1
    job, row = await _apply_row(store, event_id)
    assert job.error_class == "interrupted" and row.status == StepStatus.FAILED


async def test_a_retriable_failure_is_retried_with_its_step_failed_under_a_retry_job(
    store: Store,
) -> None:
    handler = Apply()
    event_id = await _append(store)
    handler.apply = OSError("the node was busy")  # retriable, and the effect did not begin
    assert await _run(store, handler, event_id) is JobOutcome.RETRY
    job, row = await _apply_row(store, event_id)
    assert (job.status, row.status) == (JobStatus.RETRY, StepStatus.FAILED)
    assert await _run(store, handler, event_id) is JobOutcome.DONE
    assert handler.calls == Counter(prepare=1, apply=2, finish=1)


async def test_a_failed_step_under_a_running_job_left_by_an_older_version_is_not_rerun(
    store: Store,
) -> None:
    # Versions before this one wrote a failed step apart from its job's outcome;
    # a store they left stopped between the two is resumed without a second run.
    handler, event_id = await _killed_mid_apply(store)
    job, row = await _apply_row(store, event_id)
    failed = StepOutcome(1, "apply", False, StepStatus.FAILED, row.started_at, error="boom")
    await store.jobs.step_finished(job.id, failed)
    assert await _run(store, handler, event_id) is JobOutcome.FAILED
    assert handler.calls["apply"] == 1
    job, _ = await _apply_row(store, event_id)
    assert job.error_class == "interrupted"
