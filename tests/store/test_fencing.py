"""Lease fencing: a lane's writes and step starts hold only with the lease's current token.

On SQLite and PostgreSQL: a take-over bumps the token and every write of the
old holder (job, step, event status, replay job, renewal, release) is refused
with ``LeaseLost`` and changes nothing; in a running service, a lost or
timed-out renewal cancels the lane's running step at once and stops the lane.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import asyncpg
import pytest

from schemas import Notification, parse_notification
from subscriber.config import DatabaseSettings
from subscriber.errors import LeaseLost
from subscriber.kernel import JobContext, Plan, Step
from subscriber.store import EventStatus, Fence, HeldLease, NewEvent, Store
from subscriber.store.jobs import StepOutcome
from tests.backends import pg_dsn
from tests.conftest import ServiceFactory, callback_url, wait_lanes_idle
from tests.factories import op_occ, uid
from tests.recorders import registry_with

pytestmark = pytest.mark.asyncio


async def _append(store: Store, instance: str) -> int:
    raw = json.dumps(op_occ(instance=instance, state="STARTING")).encode()
    new = NewEvent(source="http", notification=parse_notification(raw), raw=raw)
    return (await store.events.append(new)).event_id


async def _snapshot(store: Store, event_id: int) -> tuple[object, ...]:
    event = await store.events.get(event_id)
    jobs = await store.jobs.for_event(event_id)
    steps = [s for j in jobs for s in await store.jobs.steps(j.id)]
    assert event is not None
    return (
        (event.status, event.status_detail, event.replay_mode),
        [(j.id, j.status, j.attempts, j.last_error) for j in jobs],
        [(s.job_id, s.name, s.status, s.attempts, s.error) for s in steps],
    )


async def test_a_take_over_bumps_the_token_and_refuses_every_write_of_the_old_holder(
    store: Store,
) -> None:
    lane = uid()
    event_id = await _append(store, lane)
    token_a = await store.leases.acquire(lane, "A", 1.0)
    assert token_a == 1
    a = Fence(lane, "A", token_a)
    job = await store.jobs.create(event_id, "h", "live", EventStatus.RUNNING, fence=a)
    await store.jobs.step_started(job.id, 0, "init", False, fence=a)
    assert await store.leases.acquire(lane, "B", 30) is None  # A's lease is live

    await asyncio.sleep(1.2)  # A stalls past its lease; B takes the lane over
    token_b = await store.leases.acquire(lane, "B", 30)
    assert token_b == 2
    b = Fence(lane, "B", token_b)
    before = await _snapshot(store, event_id)

    done = StepOutcome(0, "init", False, "done", time.time())
    stale_writes: list[Callable[[], Awaitable[object]]] = [
        lambda: store.jobs.step_started(job.id, 1, "join", False, fence=a),
        lambda: store.jobs.step_finished(job.id, done, fence=a),
        lambda: store.jobs.update(
            job.id, event_id=event_id, status="done", event_status="done", fence=a
        ),
        lambda: store.jobs.create(event_id, "h", "live", EventStatus.RUNNING, fence=a),
        lambda: store.events.set_status(event_id, EventStatus.STALE, "x", fence=a),
        lambda: store.replays.start_job(event_id, "h", "anew", fence=a),
    ]
    for write in stale_writes:
        with pytest.raises(LeaseLost):
            await write()
    assert await store.leases.renew(a, 30) is False
    await store.leases.release(a)  # a no-op: not A's lease any more
    assert await _snapshot(store, event_id) == before, "a stale holder's write got through"
    assert await store.leases.acquire(lane, "C", 30) is None  # still B's

    # The holder's writes go through, in the same shapes.
    await store.jobs.step_finished(job.id, done, fence=b)
    await store.jobs.update(job.id, event_id=event_id, status="done", event_status="done", fence=b)
    assert (await store.events.get(event_id)).status == "done"  # type: ignore[union-attr]
    assert await store.leases.renew(b, 30) is True

    # Taking one's own lease again also moves the token on: the old one is dead.
    assert await store.leases.acquire(lane, "B", 30) == 3
    with pytest.raises(LeaseLost):
        await store.events.set_status(event_id, EventStatus.DONE, fence=b)


async def test_a_released_lease_keeps_its_token_counting(store: Store) -> None:
    lane = uid()
    tokens = []
    for owner in ("A", "B", "A", "C"):
        token = await store.leases.acquire(lane, owner, 30)
        assert token is not None
        tokens.append(token)
        await store.leases.release(Fence(lane, owner, token))
    assert tokens == [1, 2, 3, 4]  # never back to 1: an old token can never match again


async def test_no_step_starts_on_an_expired_lease_even_before_a_take_over(store: Store) -> None:
    lane = uid()
    event_id = await _append(store, lane)
    token = await store.leases.acquire(lane, "A", 1.0)
    assert token is not None
    a = Fence(lane, "A", token)
    job = await store.jobs.create(event_id, "h", "live", EventStatus.RUNNING, fence=a)
    await asyncio.sleep(1.2)
    with pytest.raises(LeaseLost):  # starting is refused: another worker may take it now
        await store.jobs.step_started(job.id, 0, "init", False, fence=a)
    assert await store.jobs.steps(job.id) == []
    # Recording what already happened is still ours to do while nobody took over.
    await store.jobs.step_finished(job.id, StepOutcome(0, "x", True, "done", 0.0), fence=a)


class SlowStep:
    """One non-idempotent step that runs until cancelled (or 30 s)."""

    name = "slow"

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.finished = 0

    def plan(self, notification: Notification) -> Plan:
        async def run(ctx: JobContext) -> None:
            self.started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            self.finished += 1

        return Plan((Step("slow", run, idempotent=False, timeout=60),))


async def _start_slow_lane(
    start_service: ServiceFactory, http: aiohttp.ClientSession, handler: SlowStep
) -> tuple[Any, str]:
    svc = await start_service(routing=registry_with(handler), lease_ttl=1.5, reorder_window=0)
    lane = uid()
    async with http.post(callback_url(svc), json=op_occ(instance=lane, state="STARTING")) as r:
        assert r.status == 204
    await asyncio.wait_for(handler.started.wait(), 10)
    return svc, lane


async def test_a_lost_renewal_cancels_the_running_step_at_once_and_stops_the_lane(
    start_service: ServiceFactory, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    handler = SlowStep()
    svc, lane = await _start_slow_lane(start_service, http, handler)
    # Another replica takes the lane over (as if ours had been paused).
    token = await svc.store.leases.acquire(
        lane, "other-replica", 60, take_over=frozenset({svc.dispatcher.worker_id})
    )
    assert token is not None and token >= 2
    # At the next renewal (ttl/3), long before the step would end by itself.
    await asyncio.wait_for(handler.cancelled.wait(), 10)
    await wait_lanes_idle(http, svc, timeout=5)  # the lane stopped
    assert handler.finished == 0
    events = await svc.store.events.list()
    # Nothing was written after the loss: the step stays "running" for the new holder.
    jobs = await svc.store.jobs.for_event(events[0].id)
    steps = await svc.store.jobs.steps(jobs[0].id)
    assert [(e.status) for e in events] == ["running"]
    assert [(s.name, s.status) for s in steps] == [("slow", "running")]
    assert "lost the lease of a running lane" in caplog.text


async def test_a_replica_paused_after_a_steps_checkpoint_does_not_begin_it_when_it_wakes(
    start_service: ServiceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The step's "running" checkpoint commits, then the process stops (SIGSTOP, a frozen
    # VM) until its lease has expired: another replica has failed that step as interrupted
    # by then, so its effect must not begin now.
    handler = SlowStep()
    svc = await start_service(routing=registry_with(handler), reorder_window=0)
    lane = uid()
    token = await svc.store.leases.acquire(lane, "paused-replica", 60)  # not the dispatcher's
    assert token is not None
    held = HeldLease(Fence(lane, "paused-replica", token), valid_until=time.monotonic() + 60)
    event = await svc.store.events.get(await _append(svc.store, lane))
    assert event is not None
    checkpoint = svc.store.jobs.step_started

    async def then_paused(*args: Any, **kwargs: Any) -> None:
        await checkpoint(*args, **kwargs)
        held.valid_until = time.monotonic()  # the pause outlasted the lease

    monkeypatch.setattr(svc.store.jobs, "step_started", then_paused)
    with pytest.raises(LeaseLost):
        await svc.runner.run(event, held)
    assert not handler.started.is_set()
    job = await svc.store.jobs.current(event.id)
    assert job is not None
    assert [(s.name, s.status) for s in await svc.store.jobs.steps(job.id)] == [("slow", "running")]


async def test_a_renewal_that_times_out_counts_as_lost(
    start_service: ServiceFactory,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handler = SlowStep()
    svc, _ = await _start_slow_lane(start_service, http, handler)

    async def hang(fence: Fence, ttl: float) -> bool:
        await asyncio.sleep(3600)
        return True

    monkeypatch.setattr(svc.store.leases, "renew", hang)
    # The lease is only sure until ttl after the last renewal was sent.
    await asyncio.wait_for(handler.cancelled.wait(), 10)
    assert handler.finished == 0
    await wait_lanes_idle(http, svc, timeout=5)


@pytest.mark.postgres
async def test_a_take_over_ends_a_session_paused_mid_statement_holding_the_lease(
    pg_url: str,
) -> None:
    """A replica paused between asyncpg's Parse (answered) and its Bind keeps its session
    'active', waiting to read from it, with the lease row locked: PostgreSQL's timeouts do
    not end it. The take-over of the expired lease ends it and goes through."""
    url = pg_url
    settings = DatabaseSettings(url=url, lock_timeout=1.0)
    async with Store(settings) as store:
        lane = uid()
        token = await store.leases.acquire(lane, "replica-a", ttl=0.5)
        assert token == 1
        paused = await asyncpg.connect(pg_dsn(url))
        paused_pid = paused.get_server_pid()
        try:
            tx = paused.transaction()
            await tx.start()
            # A's fenced write: the lease row is locked until its transaction ends.
            await paused.execute("UPDATE leases SET expires_at = expires_at WHERE lane = $1", lane)
            await paused.prepare("SELECT status FROM events WHERE id = $1")  # no Sync
            await asyncio.sleep(1.5)  # the lease expires; A's session waits 'active'
            started = time.monotonic()
            assert await store.leases.acquire(lane, "replica-b", ttl=30) == 2
            assert time.monotonic() - started < 10
            # A's session was ended by the server (its transaction rolled back).
            dsn = pg_dsn(url)
            watcher = await asyncpg.connect(dsn)
            try:
                async with asyncio.timeout(10):
                    while await watcher.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", paused_pid
                    ):
                        await asyncio.sleep(0.05)
            finally:
                await watcher.close()
        finally:
            paused.terminate()
        # A healthy holder is never ended: a live lease blocks nothing but is just held.
        assert await store.leases.acquire(lane, "replica-c", ttl=30) is None


async def test_a_lane_read_with_its_lease_comes_only_with_the_lease(store: Store) -> None:
    """The dispatcher's first look at a lane, read in the lease's own transaction (on
    PostgreSQL), is the same snapshot a read of its own gives; it is not read (nor the
    lease taken) while another owner holds the lane."""
    lane = uid()
    event_id = await _append(store, lane)
    read = store.events.lane_snapshot_read(lane)
    token, snap = await store.leases.acquire_and_read(lane, "A", 30, read)
    assert token == 1
    assert snap == await store.events.lane_snapshot(lane)
    assert snap is not None and [e.id for e in snap.open_events] == [event_id]
    looked: list[int] = []

    def watched(conn: Any) -> None:
        looked.append(1)
        read(conn)

    assert await store.leases.acquire_and_read(lane, "B", 30, watched) == (None, None)
    assert looked == []
    assert (await store.leases.acquire_and_read(lane, "A", 30, read))[0] == 2  # ours again
