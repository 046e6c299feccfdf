"""A lane's last job lets the lease go in its outcome's own write.

When the dispatcher saw nothing else open in a lane, the job that ends done
writes its outcome and the lease's release in one transaction, and the lane ends
without reading its snapshot again (one write and one read fewer per lane). An
event appended meanwhile runs next, under a new lease; a renewal that reaches the
database after that release neither takes the lease back nor counts as a loss.
On SQLite and PostgreSQL (``tests/store/``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa

from schemas import Notification
from subscriber.kernel import JobContext, Plan, Step
from subscriber.service import Service
from subscriber.store import Fence, Store
from subscriber.store.tables import leases
from tests.conftest import ServiceFactory, callback_url, wait_lanes_idle
from tests.factories import op_occ, uid
from tests.recorders import registry_with

pytestmark = pytest.mark.asyncio

# No rescan while a test runs: one would start a lane again that it finds active,
# and the tests count the lane's leases and reads.
_QUIET = {"reorder_window": 0, "rescan_interval": 60}


class Steps:
    """One step per event; the first event of ``hold`` waits for ``gate``."""

    name = "steps"

    def __init__(self, hold: str | None = None, seconds: float = 0.0) -> None:
        self.hold = hold
        self.seconds = seconds
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()
        self.order: list[tuple[str, str]] = []

    def plan(self, notification: Notification) -> Plan:
        op = str(getattr(notification, "vnfLcmOpOccId", ""))

        async def run(ctx: JobContext) -> None:
            self.order.append(("start", op))
            if self.hold == op:
                self.waiting.set()
                await self.gate.wait()
            await asyncio.sleep(self.seconds)
            self.order.append(("end", op))

        return Plan((Step("work", run, idempotent=False, timeout=30),))


async def _lease(svc: Service, lane: str) -> tuple[int, float]:
    q = sa.select(leases.c.token, leases.c.expires_at).where(leases.c.lane == lane)
    row = await svc.store.db.read(lambda conn: conn.execute(q).one())
    return int(row[0]), float(row[1])


async def _post(http: aiohttp.ClientSession, svc: Service, lane: str, op: str) -> None:
    body = op_occ(instance=lane, op_occ_id=op, state="STARTING")
    async with http.post(callback_url(svc), json=body) as r:
        assert r.status == 204


async def _statuses(svc: Service) -> list[str]:
    return [e.status for e in await svc.store.events.list()]


async def _settled(http: aiohttp.ClientSession, svc: Service, count: int) -> None:
    async with asyncio.timeout(15):
        while await _statuses(svc) != ["done"] * count:
            await asyncio.sleep(0.02)
    await wait_lanes_idle(http, svc)


async def test_a_renewal_after_the_release_does_not_take_the_lease_back(store: Store) -> None:
    lane = uid()
    token = await store.leases.acquire(lane, "A", 30)
    assert token is not None
    fence = Fence(lane, "A", token)
    assert await store.leases.renew(fence, 30)  # held: renewed
    await store.leases.release(fence)
    assert not await store.leases.renew(fence, 30)  # released: stays released
    assert await store.leases.owners() == []
    assert await store.leases.acquire(lane, "B", 30) == token + 1


async def test_a_lanes_last_job_releases_the_lease_with_its_outcome(
    start_service: ServiceFactory, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    handler = Steps()
    svc = await start_service(routing=registry_with(handler), **_QUIET)
    releases: list[Fence] = []
    snapshots: list[str] = []
    release, snapshot = svc.store.leases.release, svc.store.events.lane_snapshot

    async def counted_release(fence: Fence) -> None:
        releases.append(fence)
        await release(fence)

    async def counted_snapshot(lane: str) -> Any:
        snapshots.append(lane)
        return await snapshot(lane)

    monkeypatch.setattr(svc.store.leases, "release", counted_release)
    monkeypatch.setattr(svc.store.events, "lane_snapshot", counted_snapshot)
    lane = uid()
    await _post(http, svc, lane, uid())
    await _settled(http, svc, 1)
    token, expires_at = await _lease(svc, lane)
    assert (token, expires_at) == (1, 0.0)  # released, by the job's own write
    assert releases == []  # not by a transaction of its own
    # No second look at the lane: the first (read with the lease on PostgreSQL) only.
    assert snapshots == ([] if svc.store.leases.reads_with_acquire else [lane])


async def test_an_event_appended_while_the_last_job_runs_runs_next(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    first, second = uid(), uid()
    handler = Steps(hold=first)
    svc = await start_service(routing=registry_with(handler), **_QUIET)
    lane = uid()
    await _post(http, svc, lane, first)
    await asyncio.wait_for(handler.waiting.wait(), 10)
    await _post(http, svc, lane, second)  # the lane's snapshot saw only the first
    await asyncio.sleep(0.2)
    handler.gate.set()
    await _settled(http, svc, 2)
    assert handler.order == [("start", first), ("end", first), ("start", second), ("end", second)]
    token, expires_at = await _lease(svc, lane)
    assert token == 2 and expires_at == 0.0  # the second ran under a lease of its own


async def test_a_renewal_refused_after_the_release_is_no_loss(
    start_service: ServiceFactory,
    http: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The renewer's refusal arrives while the job's releasing write is returning: the
    lane must not be cancelled as lost (its outcome is written; nothing was lost)."""
    # Renewed after 1 s (ttl/3), before the step ends (1.3 s); the renewal may wait
    # until 3 s (the ttl) before it counts as timed out.
    handler = Steps(seconds=1.3)
    svc = await start_service(routing=registry_with(handler), lease_ttl=3.0, **_QUIET)
    released = asyncio.Event()
    refused = asyncio.Event()
    renew, update = svc.store.leases.renew, svc.store.jobs.update

    async def late_renew(fence: Fence, ttl: float) -> bool:
        await released.wait()  # sent during the step, answered after the release
        ok = await renew(fence, ttl)
        if not ok:
            refused.set()
        return ok

    async def releasing_update(*args: Any, **kwargs: Any) -> None:
        await update(*args, **kwargs)
        if kwargs.get("release"):
            released.set()
            await asyncio.wait_for(refused.wait(), 5)
            for _ in range(5):  # let the renewer act on its refusal first
                await asyncio.sleep(0)

    monkeypatch.setattr(svc.store.leases, "renew", late_renew)
    monkeypatch.setattr(svc.store.jobs, "update", releasing_update)
    lane = uid()
    await _post(http, svc, lane, uid())
    await _settled(http, svc, 1)
    assert refused.is_set()
    assert "lost the lease" not in caplog.text
    assert (await _lease(svc, lane))[1] == 0.0  # the late renewal did not take it back
