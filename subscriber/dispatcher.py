"""The dispatcher: one lane per VNF instance, events in op-occ order, leased.

* A lane runs its events one at a time; different lanes run in parallel up to
  ``max_parallel_lanes``.
* Order inside a lane: op-occs by first arrival; within an op-occ, by state
  rank (STARTING < PROCESSING < COMPLETED/FAILED_TEMP/FAILED/ROLLING_BACK <
  ROLLED_BACK), then arrival.
* A later transition waits up to ``reorder_window`` for an earlier one of the
  same op-occ that may still be in flight; a transition older than one already
  handled is marked ``stale`` and not run.
* New events wake the dispatcher at once (append listener). A rescan every
  ``rescan_interval`` catches work written by other processes (replay CLI,
  other replicas) and lanes whose lease expired.
* Each running lane holds a lease row, renewed while it runs. The lease's
  fencing token goes with every job and step write of the lane (see
  :mod:`subscriber.store.leases`). A renewal refused, timed out, or not done
  before the lease could expire means the lease is lost: the lane's running
  step is cancelled at once and the lane stops; its writes are refused anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from schemas import LcmOperationType
from subscriber.config import DispatchSettings
from subscriber.errors import LeaseLost
from subscriber.heap import trim_malloc
from subscriber.lifecycle import Component, State, wait_set
from subscriber.metrics import Metrics
from subscriber.runner import Runner
from subscriber.store import AppendedEvent, EventRow, EventStatus, Fence, HeldLease, Store
from subscriber.store.events import LaneSnapshot

__all__ = ["Dispatcher", "choose_next", "default_worker_id"]

log = logging.getLogger(__name__)

# The first state an op-occ of this operation can have (MODIFY_INFO starts at PROCESSING).
_FIRST_RANK = {LcmOperationType.MODIFY_INFO.value: 1}


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A killed worker may linger as a zombie until its new parent reaps it.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


@dataclass(frozen=True, slots=True)
class Decision:
    """What a lane should do next."""

    event: EventRow | None = None  # run this one
    stale: EventRow | None = None  # mark this one stale, then decide again
    wait_until: float | None = None  # nothing runnable before this time


def choose_next(
    open_events: Sequence[EventRow],
    op_occ_events: Sequence[tuple[str, int, str, int, int]],
    retry_at: dict[int, float],
    now: float,
    reorder_window: float,
) -> Decision:
    """Pick the lane's next event (a pure function, so ordering is testable).

    Arguments:
        open_events: the lane's pending/running/retry events.
        op_occ_events: ``(op_occ_id, event_id, status, rank, attempt)`` for
            every stored event of the op-occs in ``open_events``.
        retry_at: next attempt time of events whose job is in backoff.
    """
    if not open_events:
        return Decision()
    first_seen: dict[str, int] = {}
    ranks_seen: dict[str, set[int]] = {}
    # An op-occ's transitions go in (attempt, state rank) order: a retry's
    # PROCESSING comes after the FAILED_TEMP it retries.
    handled_max: dict[str, tuple[int, int]] = {}
    for op_occ, event_id, status, rank, attempt in op_occ_events:
        first_seen[op_occ] = min(first_seen.get(op_occ, event_id), event_id)
        ranks_seen.setdefault(op_occ, set()).add(rank)
        if status in EventStatus.HANDLED and status != EventStatus.RUNNING:
            handled_max[op_occ] = max(handled_max.get(op_occ, (-1, -1)), (attempt, rank))

    def key(e: EventRow) -> tuple[int, int, int, int]:
        if e.vnf_lcm_op_occ_id is None:
            return (e.id, 0, 0, e.id)
        first = first_seen.get(e.vnf_lcm_op_occ_id, e.id)
        return (first, e.op_occ_attempt, e.state_rank or 0, e.id)

    head = min(open_events, key=key)
    # A job already started (crash, restart) or in backoff keeps its place.
    if head.status == EventStatus.RETRY:
        at = retry_at.get(head.id, now)
        return Decision(event=head) if at <= now else Decision(wait_until=at)
    if head.status == EventStatus.RUNNING or head.vnf_lcm_op_occ_id is None:
        return Decision(event=head)
    # A replay is an operator's explicit order to run this transition again.
    # By then later transitions of its op-occ have usually been handled (the
    # replay of a failed PROCESSING job after COMPLETED arrived), which is
    # exactly what the stale rule looks for; and the reorder wait is for
    # arrivals in flight, which a stored event is not. So neither applies.
    if head.replay_mode:
        return Decision(event=head)
    op_occ, rank = head.vnf_lcm_op_occ_id, head.state_rank or 0
    if handled_max.get(op_occ, (-1, -1)) > (head.op_occ_attempt, rank):
        return Decision(stale=head)
    first_rank = _FIRST_RANK.get(head.operation or "", 0)
    predecessor_seen = rank <= first_rank or (rank - 1) in ranks_seen.get(op_occ, set())
    ready_at = head.received_at + reorder_window
    if not predecessor_seen and now < ready_at:
        return Decision(wait_until=ready_at)
    return Decision(event=head)


class Dispatcher(Component):
    """Feeds lanes from the store to the runner."""

    def __init__(
        self,
        store: Store,
        runner: Runner,
        settings: DispatchSettings,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__()
        self._metrics = metrics
        self._store = store
        self._runner = runner
        self._settings = settings
        self.worker_id = settings.worker_id or default_worker_id()
        self._grace = settings.graceful_timeout
        self._wake = asyncio.Event()
        # Lanes with work to look at, oldest work first (a dict as an ordered set), so
        # under a backlog no lane waits behind lanes whose work came later.
        self._dirty: dict[str, None] = {}
        self._timers: dict[str, float] = {}
        self._active: dict[str, asyncio.Task[None]] = {}

    # -- lifecycle -----------------------------------------------------------

    async def _start(self) -> None:
        self._store.events.add_listener(self._on_appended)
        self._spawn("dispatcher", self._loop, restart=True)

    async def stop(self, graceful_timeout: float | None = None) -> None:
        """Stop taking work, let running lanes finish their step up to the grace period.

        Lanes still running after ``graceful_timeout`` are cancelled; their
        steps stay checkpointed as running and resume on the next start.

        Arguments:
            graceful_timeout: overrides ``dispatch.graceful_timeout``.
        """
        if graceful_timeout is not None:
            self._grace = graceful_timeout
        await super().stop()

    async def _stop(self) -> None:
        self._wake.set()
        await self._cancel_task("dispatcher")
        tasks = list(self._active.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self._grace)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if pending:
                log.warning("cancelled running lanes at shutdown", extra={"lanes": len(pending)})

    # -- wake-ups ------------------------------------------------------------

    def _on_appended(self, batch: Sequence[AppendedEvent]) -> None:
        for event in batch:
            if event.lane is not None:
                self._dirty.setdefault(event.lane)
        self._wake.set()

    def poke(self, lane: str | None = None) -> None:
        """Ask for a look at ``lane`` (or a full rescan) now."""
        if lane is None:
            self._timers["*"] = 0.0
        else:
            self._dirty.setdefault(lane)
        self._wake.set()

    # -- main loop -----------------------------------------------------------

    async def _loop(self) -> None:
        next_rescan = 0.0
        dead_owners: frozenset[str] = frozenset()
        while self.state is State.RUNNING:
            now = time.time()
            if now >= next_rescan or self._timers.pop("*", None) is not None:
                try:
                    lanes = await self._store.events.lanes_with_open_events()
                    dead_owners = await self._dead_local_owners()
                except Exception:
                    log.exception("rescan failed")
                    lanes = []
                # The rescan knows every lane's oldest open event: its order goes first.
                self._dirty = dict.fromkeys([*lanes, *self._dirty])
                next_rescan = time.time() + self._settings.rescan_interval
            for lane, at in list(self._timers.items()):
                if at <= now:
                    del self._timers[lane]
                    self._dirty.setdefault(lane)
            for lane in list(self._dirty):
                if len(self._active) >= self._settings.max_parallel_lanes:
                    break
                if lane in self._active:
                    continue
                del self._dirty[lane]
                self._timers.pop(lane, None)
                task = asyncio.create_task(self._run_lane(lane, dead_owners), name=f"lane:{lane}")
                self._active[lane] = task
                if self._metrics is not None:
                    self._metrics.lanes_active.set(len(self._active))
                task.add_done_callback(functools.partial(self._lane_done, lane))
            timeout = next_rescan - time.time()
            if self._timers:
                timeout = min(timeout, min(self._timers.values()) - time.time())
            # No await since the lanes were started, so no wake-up can be lost here.
            self._wake.clear()
            await wait_set(self._wake, max(0.0, timeout))

    def _lane_done(self, lane: str, task: asyncio.Task[None]) -> None:
        self._active.pop(lane, None)
        if self._metrics is not None:
            self._metrics.lanes_active.set(len(self._active))
        if not task.cancelled() and task.exception() is not None:
            log.error("lane crashed", extra={"vnfInstanceId": lane}, exc_info=task.exception())
            self._timers[lane] = time.time() + self._settings.backoff_initial
        if not self._active and not self._dirty:
            # Nothing runs or waits: what the work freed goes back to the kernel.
            trim_malloc()
        self._wake.set()

    async def _dead_local_owners(self) -> frozenset[str]:
        """Lease owners that were earlier processes on this host (pid gone)."""
        host = socket.gethostname()
        dead = set()
        for owner in await self._store.leases.owners():
            name, _, pid = owner.rpartition(":")
            local = name == host and pid.isdigit() and owner != self.worker_id
            if local and not _pid_alive(int(pid)):
                dead.add(owner)
        return frozenset(dead)

    # -- one lane ------------------------------------------------------------

    async def _run_lane(self, lane: str, dead_owners: frozenset[str]) -> None:
        ttl = self._settings.lease_ttl
        sent = time.monotonic()
        leases = self._store.leases
        first: LaneSnapshot | None = None
        if leases.reads_with_acquire:  # the first look at the lane, in the same transaction
            token, first = await leases.acquire_and_read(
                lane,
                self.worker_id,
                ttl,
                self._store.events.lane_snapshot_read(lane),
                take_over=dead_owners,
            )
        else:
            token = await leases.acquire(lane, self.worker_id, ttl, take_over=dead_owners)
        if token is None:
            # Another worker holds it; look again when its lease may have expired.
            self._timers[lane] = time.time() + min(ttl, self._settings.rescan_interval)
            return
        held = HeldLease(Fence(lane, self.worker_id, token), valid_until=sent + ttl)
        me = asyncio.current_task()
        assert me is not None
        renew = asyncio.create_task(self._renew(held, me), name=f"lease:{lane}")
        try:
            await self._lane_loop(lane, held, first)
        except LeaseLost as exc:
            self._lost(lane, held, str(exc))
        except asyncio.CancelledError:
            # Our renewer cancelled us (lease lost): the lane just stops. A
            # cancellation from anyone else (shutdown) goes on.
            if held.lost_reason is None or me.uncancel() > 0:
                raise
            self._lost(lane, held, held.lost_reason)
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
            if not held.released:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._store.leases.release(held.fence))

    def _lost(self, lane: str, held: HeldLease, reason: str) -> None:
        log.error(
            "lost the lease of a running lane: its step was cancelled, the lane stopped",
            extra={"vnfInstanceId": lane, "token": held.fence.token, "reason": reason},
        )
        # Someone else holds it now (or soon): look again once it may be free.
        self._timers[lane] = time.time() + self._settings.lease_ttl

    async def _lane_loop(self, lane: str, held: HeldLease, first: LaneSnapshot | None) -> None:
        """Run the lane's events in turn; ``first``: its snapshot read with the lease."""
        while self.state is State.RUNNING:
            held.check()
            snap = first if first is not None else await self._store.events.lane_snapshot(lane)
            decision = self._choose(snap)
            first = None
            if decision.stale is not None:
                await self._store.events.set_status(
                    decision.stale.id,
                    EventStatus.STALE,
                    "older than a transition already handled for this op-occ",
                    fence=held.fence,
                )
                if self._metrics is not None:
                    self._metrics.skipped("stale")
                log.info(
                    "stale transition skipped",
                    extra={
                        "event_id": decision.stale.id,
                        "vnfInstanceId": lane,
                        "vnfLcmOpOccId": decision.stale.vnf_lcm_op_occ_id,
                        "operationState": decision.stale.operation_state,
                    },
                )
                continue
            if decision.event is None:
                if decision.wait_until is not None:
                    delay = decision.wait_until - time.time()
                    if delay <= self._settings.reorder_window + 0.05:
                        await asyncio.sleep(max(0.0, delay))
                        continue
                    self._timers[lane] = decision.wait_until
                break
            # Nothing else open: a job that ends done lets the lease go in its own
            # write, and the lane ends without looking again. An event appended
            # since is in ``_dirty`` (wake-up or rescan), so the lane runs again.
            held.last_of_lane = len(snap.open_events) == 1
            await self._runner.run(decision.event, held)
            if held.released:
                break

    def _choose(self, snap: LaneSnapshot) -> Decision:
        return choose_next(
            snap.open_events,
            snap.op_occ_events,
            snap.retry_at,
            time.time(),
            self._settings.reorder_window,
        )

    async def _renew(self, held: HeldLease, lane_task: asyncio.Task[None]) -> None:
        """Renew every ttl/3; on a refusal, a timeout or an expiry, cancel the lane at once."""
        ttl = self._settings.lease_ttl
        lane = held.fence.lane
        while held.lost_reason is None:
            await asyncio.sleep(max(0.0, min(ttl / 3, held.valid_until - time.monotonic())))
            sent = time.monotonic()
            if sent >= held.valid_until:
                held.lose("expired before it could be renewed")
                break
            try:
                async with asyncio.timeout(held.valid_until - sent):
                    ok = await self._store.leases.renew(held.fence, ttl)
            except TimeoutError:
                held.lose("the renewal timed out")
                break
            except Exception:
                # The store failed at once: try again while the lease is still ours.
                log.exception("lease renewal failed", extra={"vnfInstanceId": lane})
                await asyncio.sleep(min(0.5, ttl / 10))
                continue
            if not ok:
                if held.release_sent:
                    return  # refused because the job's last write released it
                held.lose("taken over by another worker")
                break
            held.valid_until = sent + ttl
        lane_task.cancel()
