"""The event log: durable append with dedup and group commit, and the reads lanes need."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from schemas import VnfLcmOperationOccurrenceNotification
from subscriber.errors import StoreError, StoreUnavailable
from subscriber.redact import redact, redact_text
from subscriber.store import statements as st
from subscriber.store.database import Database
from subscriber.store.records import AppendResult, EventRow, NewEvent, state_rank
from subscriber.store.tables import EventStatus, events
from subscriber.store.writer import INGEST, WriteQueue

__all__ = ["AppendObservation", "AppendedEvent", "EventStore", "LaneSnapshot"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppendedEvent:
    """What append listeners hear about each newly stored (non-duplicate) event."""

    event_id: int
    lane: str | None
    source: str
    notification_type: str | None
    operation: str | None
    operation_state: str | None
    received_at: float


@dataclass(frozen=True, slots=True)
class AppendObservation:
    """What append observers (metrics) hear about every committed append, duplicates too."""

    source: str
    notification_type: str | None
    operation_state: str | None
    duplicate: bool
    seconds: float  # from the append call to its commit


@dataclass(frozen=True, slots=True)
class LaneSnapshot:
    """A lane's open events, the states seen for their op-occs, and backoff deadlines."""

    open_events: list[EventRow]
    op_occ_events: list[tuple[str, int, str, int]]
    retry_at: dict[int, float]


def _row_values(new: NewEvent, now: float) -> dict[str, Any]:
    n = new.notification
    occ = n if isinstance(n, VnfLcmOperationOccurrenceNotification) else None
    return {
        "received_at": now,
        "updated_at": now,
        "source": new.source,
        "notification_type": n.notificationType.value,
        "notification_id": n.id,
        "vnf_instance_id": n.vnfInstanceId,
        "vnf_lcm_op_occ_id": occ.vnfLcmOpOccId if occ else None,
        "operation": occ.operation.value if occ else None,
        "operation_state": occ.operationState.value if occ else None,
        "notification_status": occ.notificationStatus.value if occ else None,
        "state_rank": state_rank(n),
        "dedup_key": new.dedup_key,
        "api_version": new.api_version,
        "body": new.stored_body(),
        "meta": json.dumps(redact(new.meta), separators=(",", ":")) if new.meta else None,
        "status": EventStatus.PENDING,
        "status_detail": None,
    }


class _Pending:
    __slots__ = ("future", "values")

    def __init__(self, values: dict[str, Any], future: asyncio.Future[AppendResult]) -> None:
        self.values = values
        self.future = future


class EventStore:
    """Appends events with group commit and answers the dispatcher's queries.

    Concurrent :meth:`append` calls are written by one writer task in shared
    transactions: whoever arrives while a commit is in flight joins the next
    one. Each caller still returns only after its own row is committed.
    """

    def __init__(
        self,
        db: Database,
        *,
        writer: WriteQueue,
        group_commit_max: int = 256,
    ) -> None:
        self._db = db
        self._writer = writer
        self._max = group_commit_max
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[Sequence[AppendedEvent]], None]] = []
        self._observers: list[Callable[[Sequence[AppendObservation]], None]] = []
        self._closed = False
        self._insert = (
            postgresql.insert(events) if db.dialect_name == "postgresql" else sqlite.insert(events)
        )

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("EventStore already started")
        self._task = asyncio.create_task(self._write_loop(), name="event-batcher")
        self._task.add_done_callback(self._task_done)

    async def stop(self) -> None:
        """Write what is queued, then stop the writer (idempotent)."""
        self._closed = True
        task, self._task = self._task, None
        if task is None:
            return
        await self._queue.put(_Pending({}, asyncio.get_running_loop().create_future()))
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        # If the writer dies, nobody may wait forever for a commit.
        exc = None if task.cancelled() else task.exception()
        err = StoreError(f"event writer stopped: {exc or 'cancelled'}")
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if not item.future.done():
                item.future.set_exception(err)
        if exc is not None:
            log.error("event writer died", exc_info=exc)

    def add_listener(self, listener: Callable[[Sequence[AppendedEvent]], None]) -> None:
        """Call ``listener`` (synchronously, on the loop) with every committed batch."""
        self._listeners.append(listener)

    def add_observer(self, observer: Callable[[Sequence[AppendObservation]], None]) -> None:
        """Call ``observer`` (synchronously, on the loop) with the outcome of every append."""
        self._observers.append(observer)

    # -- append --------------------------------------------------------------

    async def append(self, new: NewEvent) -> AppendResult:
        """Store one event durably unless its dedup key is already stored.

        Returns:
            the event id and whether it was a duplicate (nothing added).

        Raises:
            StoreUnavailable: the database could not be written (retriable).
            StoreError: the store is stopped.
        """
        if self._closed or self._task is None:
            raise StoreError("event store is not running")
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending(_row_values(new, time.time()), future))
        return await future

    async def append_many(self, news: Sequence[NewEvent]) -> builtins.list[AppendResult]:
        """Like :meth:`append` for many events at once (a Kafka fetch): one call, no task each.

        All of them join the group commit together; returns their results in
        order once every one is committed. Raises like :meth:`append` if any fails.
        """
        if self._closed or self._task is None:
            raise StoreError("event store is not running")
        loop = asyncio.get_running_loop()
        now = time.time()
        futures: builtins.list[asyncio.Future[AppendResult]] = []
        for new in news:
            future: asyncio.Future[AppendResult] = loop.create_future()
            self._queue.put_nowait(_Pending(_row_values(new, now), future))
            futures.append(future)
        return builtins.list(await asyncio.gather(*futures))

    async def _write_loop(self) -> None:
        while True:
            first = await self._queue.get()
            batch = [first]
            while len(batch) < self._max and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            stopping = any(not p.values for p in batch)
            work = [p for p in batch if p.values]
            if work:
                await self._commit_batch(work)
            if stopping:
                for p in batch:
                    if not p.values and not p.future.done():
                        p.future.set_result(AppendResult(0, True))
                return

    async def _commit_batch(self, batch: list[_Pending]) -> None:
        # Collapse duplicates inside the batch: the first one is inserted.
        by_key: dict[str, list[_Pending]] = {}
        for item in batch:
            by_key.setdefault(item.values["dedup_key"], []).append(item)
        rows = [items[0].values for items in by_key.values()]
        stmt = self._insert.on_conflict_do_nothing(index_elements=["dedup_key"]).returning(
            events.c.id, events.c.dedup_key
        )

        def write(conn: Connection) -> tuple[dict[str, int], dict[str, int]]:
            inserted = {r.dedup_key: r.id for r in conn.execute(stmt, rows).all()}
            missing = [k for k in by_key if k not in inserted]
            existing: dict[str, int] = {}
            if missing:
                res = conn.execute(
                    sa.select(events.c.id, events.c.dedup_key).where(
                        events.c.dedup_key.in_(missing)
                    )
                )
                existing = {r.dedup_key: r.id for r in res.all()}
            return inserted, existing

        try:
            inserted, existing = await self._writer.run(write, priority=INGEST)
        except Exception as exc:
            err = (
                exc
                if isinstance(exc, StoreError)
                else StoreUnavailable(f"could not store events: {type(exc).__name__}")
            )
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(err)
            log.error("event batch failed: %s", err)
            return

        appended: list[AppendedEvent] = []
        for key, items in by_key.items():
            if key in inserted:
                first, rest = items[0], items[1:]
                v = first.values
                appended.append(
                    AppendedEvent(
                        inserted[key],
                        v["vnf_instance_id"],
                        v["source"],
                        v["notification_type"],
                        v["operation"],
                        v["operation_state"],
                        v["received_at"],
                    )
                )
                if not first.future.done():
                    first.future.set_result(AppendResult(inserted[key], False))
                for item in rest:
                    if not item.future.done():
                        item.future.set_result(AppendResult(inserted[key], True))
            else:
                event_id = existing.get(key, 0)
                for item in items:
                    if not item.future.done():
                        item.future.set_result(AppendResult(event_id, True))
        if self._observers:
            now = time.time()
            observed = [
                AppendObservation(
                    item.values["source"],
                    item.values["notification_type"],
                    item.values["operation_state"],
                    not (key in inserted and item is items[0]),
                    now - item.values["received_at"],
                )
                for key, items in by_key.items()
                for item in items
            ]
            for observer in self._observers:
                try:
                    observer(observed)
                except Exception:
                    log.exception("append observer failed")
        if appended:
            for listener in self._listeners:
                try:
                    listener(appended)
                except Exception:
                    log.exception("append listener failed")

    async def append_recorded(self, new: NewEvent, status: str, detail: str) -> AppendResult:
        """Store a transition that must not run (e.g. one implied by a later state).

        Written with ``status`` at once (never ``pending``), so no lane ever
        picks it up; deduplicated like :meth:`append`. Listeners are not woken.
        """
        values = {**_row_values(new, time.time()), "status": status, "status_detail": detail}
        stmt = self._insert.on_conflict_do_nothing(index_elements=["dedup_key"]).returning(
            events.c.id
        )
        key = values["dedup_key"]

        def write(conn: Connection) -> AppendResult:
            row = conn.execute(stmt, [values]).first()
            if row is not None:
                return AppendResult(row[0], False)
            existing = conn.scalar(sa.select(events.c.id).where(events.c.dedup_key == key))
            return AppendResult(int(existing or 0), True)

        return await self._writer.run(write, priority=INGEST)

    async def append_poison(
        self,
        *,
        source: str,
        raw: bytes,
        error: str,
        dedup_key: str,
        meta: dict[str, Any] | None = None,
    ) -> AppendResult:
        """Keep an input that is not a valid notification, for the operator.

        It is stored with status ``poison`` (never dispatched), its raw text
        redacted, and the validation ``error``. ``dedup_key`` must identify the
        input's origin (e.g. ``poison|kafka|topic|partition|offset``) so a
        redelivery adds nothing.
        """
        now = time.time()
        text = raw.decode("utf-8", errors="replace")
        try:
            body = json.dumps(redact(json.loads(text)), separators=(",", ":"))
        except ValueError:
            body = json.dumps({"raw": redact_text(text)})
        values = {
            "received_at": now,
            "updated_at": now,
            "source": source,
            "dedup_key": dedup_key,
            "body": body,
            "meta": json.dumps(redact(meta), separators=(",", ":")) if meta else None,
            "status": EventStatus.POISON,
            "status_detail": redact_text(error),
        }
        stmt = self._insert.on_conflict_do_nothing(index_elements=["dedup_key"]).returning(
            events.c.id
        )

        def write(conn: Connection) -> AppendResult:
            row = conn.execute(stmt, [values]).first()
            if row is not None:
                return AppendResult(row[0], False)
            existing = conn.scalar(sa.select(events.c.id).where(events.c.dedup_key == dedup_key))
            return AppendResult(int(existing or 0), True)

        return await self._writer.run(write, priority=INGEST)

    # -- reads ---------------------------------------------------------------

    async def get(self, event_id: int) -> EventRow | None:
        q = sa.select(events).where(events.c.id == event_id)
        row = await self._db.read(lambda conn: conn.execute(q).mappings().first())
        return EventRow.from_mapping(row) if row else None

    async def list(
        self,
        *,
        status: str | None = None,
        vnf_instance_id: str | None = None,
        limit: int | None = None,
        after_id: int = 0,
    ) -> builtins.list[EventRow]:
        """Events in id order, optionally filtered."""
        q = sa.select(events).where(events.c.id > after_id).order_by(events.c.id)
        if status:
            q = q.where(events.c.status == status)
        if vnf_instance_id:
            q = q.where(events.c.vnf_instance_id == vnf_instance_id)
        if limit:
            q = q.limit(limit)
        rows = await self._db.read(lambda conn: conn.execute(q).mappings().all())
        return [EventRow.from_mapping(r) for r in rows]

    async def lanes_with_open_events(self) -> builtins.list[str]:
        """Every lane (vnfInstanceId) that has pending, running or retrying events."""
        q = (
            sa.select(events.c.vnf_instance_id)
            .where(events.c.status.in_(EventStatus.OPEN))
            .group_by(events.c.vnf_instance_id)
        )
        rows = await self._db.read(lambda conn: conn.execute(q).all())
        return [r[0] for r in rows if r[0] is not None]

    async def lane_snapshot(self, lane: str) -> LaneSnapshot:
        """Everything the dispatcher needs to pick a lane's next event, in one read."""

        def read(conn: Connection) -> LaneSnapshot:
            rows = [
                EventRow.from_mapping(r)
                for r in conn.execute(st.LANE_OPEN_EVENTS, {"b_lane": lane}).mappings().all()
            ]
            ids = sorted({e.vnf_lcm_op_occ_id for e in rows if e.vnf_lcm_op_occ_id})
            states: builtins.list[tuple[str, int, str, int]] = []
            if ids:
                states = [
                    (r[0], r[1], r[2], r[3])
                    for r in conn.execute(st.OP_OCC_STATES, {"b_ids": ids}).all()
                ]
            retry_ids = [e.id for e in rows if e.status == EventStatus.RETRY]
            retry_at: dict[int, float] = {}
            if retry_ids:
                retry_at = {
                    r[0]: r[1]
                    for r in conn.execute(st.RETRY_AT, {"b_ids": retry_ids}).all()
                    if r[1] is not None
                }
            return LaneSnapshot(rows, states, retry_at)

        return await self._db.read(read)

    async def set_status(self, event_id: int, status: str, detail: str | None = None) -> None:
        args = {
            "b_event_id": event_id,
            "b_status": status,
            "b_detail": detail,
            "b_now": time.time(),
        }

        def write(conn: Connection) -> None:
            conn.execute(st.SET_EVENT_STATUS, args)

        await self._writer.run(write)
