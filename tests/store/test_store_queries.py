"""The operator reads behind ``failed``, ``replay`` and ``/metrics``, on SQLite and PostgreSQL.

They live in the store (``store.failed``, ``store.events``, ``store.replays``);
these tests pin what each returns on both backends.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from schemas import parse_notification
from schemas.hooks import hook_key
from subscriber.store import EventStatus, FailedFilter, Fence, NewEvent, Store
from subscriber.store.jobs import StepOutcome
from tests.factories import op_occ, uid

pytestmark = pytest.mark.asyncio


async def _append(store: Store, **kwargs: str) -> int:
    raw = json.dumps(op_occ(**kwargs)).encode()  # type: ignore[arg-type]
    new = NewEvent(source="http", notification=parse_notification(raw), raw=raw)
    return (await store.events.append(new)).event_id


async def _fail(
    store: Store, event_id: int, *, error_class: str, failed_step: str | None = None
) -> int:
    job = await store.jobs.create(event_id, "instantiate", "normal", EventStatus.RUNNING)
    now = time.time()
    await store.jobs.step_finished(job.id, StepOutcome(0, "discover", True, "done", now))
    if failed_step is not None:
        await store.jobs.step_finished(
            job.id, StepOutcome(1, failed_step, False, "failed", now, error="exit 1")
        )
    await store.jobs.update(
        job.id,
        event_id=event_id,
        status="failed",
        event_status=EventStatus.FAILED,
        attempts=3,
        error_class=error_class,
        last_error=f"{error_class}: it broke",
    )
    return job.id


async def test_failed_select_filters_and_reports_the_newest_job(store: Store) -> None:
    x, y = uid(), uid()
    a = await _append(store, instance=x, state="COMPLETED")
    b = await _append(store, instance=y, operation="HEAL", state="FAILED_TEMP")
    c = await _append(store, instance=x, operation="TERMINATE", state="COMPLETED")
    await _fail(store, a, error_class="TransientStepError")
    newest = await _fail(store, a, error_class="CommandFailed", failed_step="join")
    await store.events.set_status(b, EventStatus.FAILED, "no handler ran")
    await store.events.set_status(c, EventStatus.DONE)

    rows = await store.failed.select(FailedFilter())
    assert [r.event_id for r in rows] == [a, b]
    first, second = rows
    assert (first.job_id, first.error_class, first.failed_step, first.attempts) == (
        newest,
        "CommandFailed",
        "join",
        3,
    )
    assert first.as_json()["lastError"] == "CommandFailed: it broke"
    assert (second.job_id, second.handler, second.failed_step) == (None, None, None)

    async def ids(flt: FailedFilter, limit: int | None = None) -> list[int]:
        return [r.event_id for r in await store.failed.select(flt, limit=limit)]

    assert await ids(FailedFilter(instance=y)) == [b]
    assert await ids(FailedFilter(operation="heal", state="failed_temp")) == [b]
    assert await ids(FailedFilter(error_class="CommandFailed")) == [a]
    assert await ids(FailedFilter(error_class="TransientStepError")) == []  # older job only
    assert await ids(FailedFilter(since=time.time() + 60)) == []
    assert await ids(FailedFilter(until=time.time() + 60)) == [a, b]
    assert await ids(FailedFilter(), limit=1) == [a]
    assert await ids(FailedFilter(statuses=(EventStatus.DONE,))) == [c]


async def test_get_many_returns_existing_events_in_id_order(store: Store) -> None:
    first = await _append(store)
    second = await _append(store)
    got = await store.events.get_many([second, 10_000, first, second])
    assert [e.id for e in got] == [first, second]
    assert await store.events.get_many([]) == []


async def test_queue_stats_count_statuses_the_longest_lane_and_the_newest(store: Store) -> None:
    assert (await store.events.queue_stats()).newest_received_at is None
    busy, calm = uid(), uid()
    for _ in range(3):
        await _append(store, instance=busy)
    quiet = await _append(store, instance=calm)
    done = await _append(store, instance=calm)
    await store.events.set_status(done, EventStatus.DONE)
    await store.events.set_status(quiet, EventStatus.FAILED)

    stats = await store.events.queue_stats()
    assert stats.by_status == {"pending": 3, "done": 1, "failed": 1}
    assert stats.longest_lane == 3
    newest = max(e.received_at for e in await store.events.list())
    assert stats.newest_received_at == pytest.approx(newest)


async def test_queue_stats_find_lanes_nobody_holds_and_hooks_that_wait(store: Store) -> None:
    """``lccn_lanes_past_lease`` and ``lccn_hooks_waiting`` / ``lccn_hook_wait_seconds_max``."""
    assert (await store.events.queue_stats()).lanes_past_lease == 0
    held, expired, released, never = uid(), uid(), uid(), uid()
    for lane in (held, expired, released, never):
        event = await _append(store, instance=lane)
        await store.events.set_status(event, EventStatus.RUNNING)
    await _append(store, instance=uid())  # pending: waits for its lane, no lease needed
    assert await store.leases.acquire(held, "w1", 30.0) is not None
    assert await store.leases.acquire(expired, "w2", 0.01) is not None
    token = await store.leases.acquire(released, "w3", 30.0)
    assert token is not None
    await store.leases.release(Fence(released, "w3", token))
    await asyncio.sleep(0.05)  # expired's lease runs out
    stats = await store.events.queue_stats()
    assert stats.lanes_past_lease == 3  # expired, released, never leased; not held
    assert (stats.hooks_waiting, stats.oldest_hook_since) == (0, None)

    # A hook request (kept under hook:<op-occ>:<state>) waits while its event is open.
    occ, other = uid(), uid()
    before = time.time()
    await store.tacker.set_value(hook_key(occ, "COMPLETED"), "{}")
    await store.tacker.set_value(hook_key(other, "PROCESSING"), "{}")
    waiting = await _append(store, op_occ_id=occ, state="COMPLETED")
    answered = await _append(store, op_occ_id=other, operation="SCALE", state="PROCESSING")
    await store.events.set_status(answered, EventStatus.DONE)
    await _append(store, op_occ_id=uid(), state="COMPLETED")  # no hook asked for it
    stats = await store.events.queue_stats()
    assert stats.hooks_waiting == 1
    assert stats.oldest_hook_since is not None and before <= stats.oldest_hook_since <= time.time()
    await store.events.set_status(waiting, EventStatus.FAILED)
    stats = await store.events.queue_stats()
    assert (stats.hooks_waiting, stats.oldest_hook_since) == (0, None)


async def test_replay_history_gives_the_last_job_and_what_the_instance_ran_since(
    store: Store,
) -> None:
    inst, occ, later, other = uid(), uid(), uid(), uid()
    event = await _append(store, instance=inst, op_occ_id=occ, state="COMPLETED")
    await _fail(store, event, error_class="X")
    last = await _fail(store, event, error_class="CommandFailed", failed_step="join")
    await _append(store, instance=inst, op_occ_id=occ, state="FAILED_TEMP")  # same op-occ
    started = await _append(store, instance=inst, op_occ_id=later, state="STARTING")
    done = await _append(store, instance=inst, op_occ_id=later, state="COMPLETED")
    await _append(store, instance=inst, op_occ_id=later, state="PROCESSING")  # arrived late
    await _append(store, instance=uid(), op_occ_id=other, state="STARTING")  # other instance

    row = await store.events.get(event)
    assert row is not None
    history = await store.replays.history(row)
    assert history.last_job is not None and history.last_job.id == last
    assert [(s.name, s.status) for s in history.last_steps] == [
        ("discover", "done"),
        ("join", "failed"),
    ]
    assert [(o.op_occ_id, o.operation_state, o.event_id) for o in history.later_op_occs] == [
        (later, "COMPLETED", done)
    ]
    assert started < done

    fresh = await store.events.get(started)
    assert fresh is not None
    quiet = await store.replays.history(fresh)
    assert (quiet.last_job, quiet.last_steps, quiet.later_op_occs) == (None, [], [])
