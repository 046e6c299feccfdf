"""The event log: durable append with dedup and group commit, and the reads lanes need."""

from __future__ import annotations

import asyncio
import builtins
import collections
import functools
import json
import logging
import operator
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from pydantic_core import to_json
from sqlalchemy.engine import Connection

from schemas import VnfLcmOperationOccurrenceNotification
from subscriber.errors import StoreError, StoreUnavailable
from subscriber.heap import trim_malloc
from subscriber.lifecycle import Component, State, wait_set
from subscriber.redact import redact, redact_text
from subscriber.store import statements as st
from subscriber.store.attempts import Seen, attempt_of, notified_at
from subscriber.store.database import Database
from subscriber.store.leases import Fence, fenced
from subscriber.store.records import (
    APPEND_COLUMNS,
    AppendResult,
    EventRow,
    NewEvent,
    op_occ_key,
    state_rank,
)
from subscriber.store.tables import EventStatus, events, kv, leases
from subscriber.store.writer import IDLE_TRIM_AFTER, INGEST, WriteQueue

__all__ = ["AppendObservation", "AppendedEvent", "EventStore", "LaneSnapshot", "QueueStats"]

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
    op_occ_events: list[tuple[str, int, str, int, int]]
    retry_at: dict[int, float]


@dataclass(frozen=True, slots=True)
class QueueStats:
    """What the store-backed gauges show: events by status, the longest lane, the newest,
    the lanes nobody holds while their job runs, the hooks waiting for their job."""

    by_status: dict[str, int]
    longest_lane: int  # open events of the lane with the most
    newest_received_at: float | None  # None: no event stored yet
    # Lanes with a running event and no live lease: its holder died or stalls, and
    # nobody took the lane over (yet).
    lanes_past_lease: int = 0
    # Management-driver hook requests whose transition's event is still open, and when
    # the one waiting longest was made (None: none waits).
    hooks_waiting: int = 0
    oldest_hook_since: float | None = None


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
        # pydantic-core's encoder: a seventh of json.dumps's time for this small mapping.
        "meta": to_json(redact(new.meta)).decode() if new.meta else None,
        "status": EventStatus.PENDING,
        "status_detail": None,
        "notified_at": notified_at(n.timeStamp) if occ else None,
        "op_occ_attempt": 0,
        "traceparent": new.traceparent,
    }


class _Pending:
    """One append call's rows and the future of their results."""

    __slots__ = ("future", "rows")

    def __init__(
        self,
        rows: list[dict[str, Any]],
        future: asyncio.Future[list[AppendResult]],
    ) -> None:
        self.rows = rows
        self.future = future


class _Commit:
    """One group commit: the appends it took when its transaction began."""

    __slots__ = ("batch", "cancelled", "started")

    def __init__(self) -> None:
        self.batch: list[_Pending] = []
        self.started = False  # set by whoever runs the transaction (the writer thread)
        # Set on the loop when the commit's task is cancelled: a transaction that
        # begins after it takes nothing, as nobody would hear of its outcome.
        self.cancelled = False

    def take(self, waiting: collections.deque[_Pending], most: int) -> list[_Pending]:
        """Move appends from ``waiting`` into this commit: up to ``most`` rows, at least
        one append (one ``append_many`` is never split). Thread-safe: ``popleft`` is atomic
        and only commits take."""
        self.started = True
        if self.cancelled:
            return self.batch
        size = 0
        while size < most or not self.batch:
            try:
                item = waiting.popleft()
            except IndexError:
                break
            self.batch.append(item)
            size += len(item.rows)
        return self.batch


_SQLITE_ROW = f"({', '.join('?' * (len(APPEND_COLUMNS) + 1))})"
# Rows per multi-row INSERT: 21 parameters each, well inside SQLite's 32766.
_ROWS_PER_INSERT = 500
_TASK = "event-batcher"
_IN_FLIGHT = 2  # batches committing at once (one in the transaction, the next queued)


# A row's values in APPEND_COLUMNS order, in one C call (the writer thread holds the
# GIL for this, while ingest's loop waits for it).
_append_values = operator.itemgetter(*APPEND_COLUMNS)


@functools.lru_cache(maxsize=64)
def _sqlite_insert(rows: int) -> str:
    return (
        f"INSERT INTO events (id, {', '.join(APPEND_COLUMNS)}) "
        f"VALUES {', '.join([_SQLITE_ROW] * rows)}"
    )


# SQLite allows 32766 host parameters per statement (3.32+); stay well below.
_KEYS_PER_SELECT = 500


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _keyed_rows(conn: Connection, select: str, keys: Sequence[str]) -> list[Any]:
    """The rows of ``select`` (ending in ``WHERE ... <text column>``) whose column is one of
    ``keys``, by plain driver SQL: on every append batch's path, where SQLAlchemy Core's
    expanding ``IN`` cost as much as the lookup. PostgreSQL takes one array; SQLite an
    ``IN (?...)`` per chunk, under its host-parameter limit."""
    if not keys:
        return []
    if conn.dialect.name == "postgresql":
        return list(conn.exec_driver_sql(f"{select} = ANY($1::text[])", (list(keys),)))
    found: list[Any] = []
    for chunk in _chunks(keys, _KEYS_PER_SELECT):
        marks = ", ".join("?" * len(chunk))
        found.extend(conn.exec_driver_sql(f"{select} IN ({marks})", tuple(chunk)))
    return found


def _existing_ids(conn: Connection, keys: Sequence[str]) -> dict[str, int]:
    """The ids of the events already stored under any of ``keys``."""
    rows = _keyed_rows(conn, "SELECT dedup_key, id FROM events WHERE dedup_key", keys)
    return {key: event_id for key, event_id in rows}


# The state is a literal, not a parameter, so SQLite can use the partial index
# ix_events_failed_temp_op_occ.
_FAILING = (
    "SELECT DISTINCT vnf_lcm_op_occ_id FROM events "
    "WHERE operation_state = 'FAILED_TEMP' AND vnf_lcm_op_occ_id"
)


def _failing_op_occs(conn: Connection, occs: Sequence[str]) -> set[str]:
    """The op-occs of ``occs`` with a stored FAILED_TEMP event."""
    return {occ for (occ,) in _keyed_rows(conn, _FAILING, occs)}


def assign_attempts(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Set the op-occ attempt of each row, and its dedup key with it (in place).

    Only op-occs that ever reached FAILED_TEMP can have attempts beyond 0, so
    the usual batch costs one indexed lookup. Runs in the write transaction:
    the stored history cannot change under it. Idempotent, since the writer
    runs a failed batch's operations again one by one.
    """
    occ_rows = [r for r in rows if r["vnf_lcm_op_occ_id"] and r["operation_state"]]
    if not occ_rows:
        return
    failing = {r["vnf_lcm_op_occ_id"] for r in occ_rows if r["operation_state"] == "FAILED_TEMP"}
    others = sorted({r["vnf_lcm_op_occ_id"] for r in occ_rows} - failing)
    failing.update(_failing_op_occs(conn, others))
    if not failing:
        return
    history: dict[str, list[Seen]] = {}
    for chunk in _chunks(sorted(failing), _KEYS_PER_SELECT):
        for occ, state, rank, at, attempt in conn.execute(
            st.OP_OCC_HISTORY, {"b_ids": list(chunk)}
        ):
            history.setdefault(occ, []).append(Seen(state, rank or 0, at, attempt or 0))
    ordered = sorted(
        (r for r in occ_rows if r["vnf_lcm_op_occ_id"] in failing),
        key=lambda r: (r["notified_at"] is None, r["notified_at"] or 0.0, r["state_rank"] or 0),
    )
    for row in ordered:
        occ, state, rank = row["vnf_lcm_op_occ_id"], row["operation_state"], row["state_rank"] or 0
        seen = history.setdefault(occ, [])
        attempt = attempt_of(seen, state, rank, row["notified_at"])
        row["op_occ_attempt"] = attempt
        row["dedup_key"] = op_occ_key(occ, state, row["notification_status"], attempt)
        seen.append(Seen(state, rank, row["notified_at"], attempt))


def _insert_new_sqlite(
    conn: Connection, rows: Sequence[dict[str, Any]]
) -> tuple[dict[str, int], dict[str, int]]:
    """SQLite fast path: skip stored keys, give the rest the next ids, insert them in bulk.

    Runs inside the writer's ``BEGIN IMMEDIATE`` transaction, which holds the
    database's only write lock, so no other process can take these ids or
    keys before the commit. Explicit ids spare ``RETURNING`` and SQLAlchemy's
    per-row parameter work.
    """
    existing = _existing_ids(conn, [r["dedup_key"] for r in rows])
    new = [r for r in rows if r["dedup_key"] not in existing]
    if not new:
        return {}, existing
    top = conn.exec_driver_sql("SELECT max(id) FROM events").scalar() or 0
    ids = range(top + 1, top + 1 + len(new))
    # One multi-row statement per chunk rather than executemany: the driver
    # gives up the GIL around every step, and winning it back from a busy
    # event loop takes a switch interval each time; one step per chunk does not.
    for start in range(0, len(new), _ROWS_PER_INSERT):
        chunk = new[start : start + _ROWS_PER_INSERT]
        params: list[Any] = []
        for event_id, row in zip(ids[start:], chunk, strict=False):
            params.append(event_id)
            params.extend(_append_values(row))
        conn.exec_driver_sql(_sqlite_insert(len(chunk)), tuple(params))
    return {r["dedup_key"]: i for i, r in zip(ids, new, strict=True)}, existing


def _array_type(column: str) -> str:
    kind = events.c[column].type
    if isinstance(kind, sa.Float):
        return "float8"
    if isinstance(kind, sa.Integer):
        return "int8" if isinstance(kind, sa.BigInteger) else "int4"
    return "text"


# One array per column, whatever the number of rows: asyncpg encodes the arrays in C,
# where SQLAlchemy's insertmanyvalues processes every row's every parameter in Python.
_PG_INSERT = (
    f"INSERT INTO events ({', '.join(APPEND_COLUMNS)}) "
    "SELECT * FROM unnest("
    + ", ".join(f"${i}::{_array_type(c)}[]" for i, c in enumerate(APPEND_COLUMNS, 1))
    + ") ON CONFLICT (dedup_key) DO NOTHING RETURNING dedup_key, id"
)


def _insert_new_postgresql(
    conn: Connection, rows: Sequence[dict[str, Any]]
) -> tuple[dict[str, int], dict[str, int]]:
    """PostgreSQL: insert what is new in one statement, learning the new ids from
    ``RETURNING``, then the ids of the keys already stored."""
    columns = builtins.list(zip(*map(_append_values, rows), strict=True))
    result = conn.exec_driver_sql(_PG_INSERT, tuple(map(builtins.list, columns)))
    inserted: dict[str, int] = {key: event_id for key, event_id in result}
    missing = [r["dedup_key"] for r in rows if r["dedup_key"] not in inserted]
    return inserted, _existing_ids(conn, missing)


# A whole append batch in one statement that commits on its own (no BEGIN or COMMIT
# round trips): its rows are inserted unless one of its op-occs has a stored FAILED_TEMP
# (then none is, and the batch takes the transactional path, which numbers attempts).
# The ids of keys stored before come from a second look only when there are such keys.
_PG_APPEND = (
    "WITH batch AS (SELECT * FROM unnest("
    + ", ".join(f"${i}::{_array_type(c)}[]" for i, c in enumerate(APPEND_COLUMNS, 1))
    + f") AS t({', '.join(APPEND_COLUMNS)})), "
    f"failing AS ({_FAILING} = ANY(${len(APPEND_COLUMNS) + 1}::text[])), "
    f"added AS (INSERT INTO events ({', '.join(APPEND_COLUMNS)}) "
    "SELECT * FROM batch WHERE NOT EXISTS (SELECT 1 FROM failing) "
    "ON CONFLICT (dedup_key) DO NOTHING RETURNING dedup_key, id) "
    "SELECT false, dedup_key, id FROM added "
    "UNION ALL SELECT true, vnf_lcm_op_occ_id, 0 FROM failing"
)


def _append_postgresql(
    conn: Connection, rows: Sequence[dict[str, Any]]
) -> tuple[dict[str, int], dict[str, int]] | None:
    """PostgreSQL, a batch none of whose rows is a FAILED_TEMP: store its new rows (their
    attempt is 0) in one statement; ``None`` (nothing stored) when an op-occ of the
    batch has a stored FAILED_TEMP, whose attempts :func:`assign_attempts` must number.

    ``conn`` commits each statement on its own (``Database.write_alone``). A key the
    insert skipped was committed before it returned (``ON CONFLICT`` waits for the
    transaction that holds it), so the look for its id that follows finds it.
    """
    firsts: dict[str, dict[str, Any]] = {}
    for row in rows:
        firsts.setdefault(row["dedup_key"], row)
    unique = builtins.list(firsts.values())
    columns = [builtins.list(c) for c in zip(*map(_append_values, unique), strict=True)]
    occs = builtins.list({r["vnf_lcm_op_occ_id"] for r in unique if r["vnf_lcm_op_occ_id"]})
    inserted: dict[str, int] = {}
    for failing, key, event_id in conn.exec_driver_sql(_PG_APPEND, (*columns, occs)):
        if failing:
            return None
        inserted[key] = event_id
    return inserted, _existing_ids(conn, [key for key in firsts if key not in inserted])


class EventStore(Component):
    """Appends events with group commit and answers the dispatcher's queries.

    Concurrent :meth:`append` calls are written by one writer task in shared
    transactions: whoever arrives while a commit is in flight joins the next
    one. Each caller still returns only after its own row is committed.
    ``stop()`` writes what is queued first. Should the writer task crash, the
    appends queued then fail and the task is restarted.
    """

    def __init__(
        self,
        db: Database,
        *,
        writer: WriteQueue,
        group_commit_max: int = 256,
    ) -> None:
        super().__init__()
        self._db = db
        self._writer = writer
        self._max = group_commit_max
        # Appends not yet taken by a commit; commits take them when their transaction
        # begins (in the writer thread on SQLite), not when they are queued.
        self._waiting: collections.deque[_Pending] = collections.deque()
        self._wake = asyncio.Event()
        self._closing = False
        self._listeners: list[Callable[[Sequence[AppendedEvent]], None]] = []
        self._observers: list[Callable[[Sequence[AppendObservation]], None]] = []
        self._insert = db.insert(events)

    # -- lifecycle -----------------------------------------------------------

    async def _start(self) -> None:
        self._closing = False
        self._spawn(_TASK, self._write_loop, restart=True)

    async def _stop(self) -> None:
        # The loop returns once every append queued before it has been written.
        self._closing = True
        self._wake.set()
        if self._task(_TASK) is not None:
            await self._join_task(_TASK)
        self._fail_queued(StoreError("event writer stopped"))

    def _on_task_error(self, name: str, exc: BaseException) -> None:
        # If the writer dies, nobody may wait forever for a commit.
        self._fail_queued(StoreError(f"event writer stopped: {exc}"))

    def _fail_queued(self, err: StoreError) -> None:
        while self._waiting:
            item = self._waiting.popleft()
            if not item.future.done():
                item.future.set_exception(err)

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
        results = await self._enqueue([_row_values(new, time.time())])
        return results[0]

    async def append_many(self, news: Sequence[NewEvent]) -> builtins.list[AppendResult]:
        """Like :meth:`append` for many events at once (a Kafka fetch).

        They join one group commit together and return their results in
        order once all are committed. Raises like :meth:`append`.
        """
        if not news:
            return []
        now = time.time()
        return await self._enqueue([_row_values(new, now) for new in news])

    async def _enqueue(self, rows: builtins.list[dict[str, Any]]) -> builtins.list[AppendResult]:
        if self.state is not State.RUNNING:
            raise StoreError("event store is not running")
        future: asyncio.Future[builtins.list[AppendResult]] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiting.append(_Pending(rows, future))
        self._wake.set()
        return await future

    async def _write_loop(self) -> None:
        # Up to _IN_FLIGHT commits at once: while one commits, the next is queued for
        # the database, so a commit never waits for this loop to come round. A queued
        # commit takes its appends when its transaction begins, so it carries all that
        # arrived until then; a new one is queued only once every queued one has begun.
        committing: dict[asyncio.Task[None], _Commit] = {}

        def done(task: asyncio.Task[None]) -> None:
            committing.pop(task, None)
            self._wake.set()

        trimmed = True  # no commit since malloc was last trimmed
        try:
            while True:
                if not self._waiting:
                    if self._closing and not committing:
                        return
                elif len(committing) < _IN_FLIGHT and all(c.started for c in committing.values()):
                    commit = _Commit()
                    task = asyncio.ensure_future(self._commit_batch(commit))
                    committing[task] = commit
                    task.add_done_callback(done)
                    trimmed = False
                    continue
                self._wake.clear()
                if trimmed or committing:
                    await self._wake.wait()
                    continue
                if not await wait_set(self._wake, IDLE_TRIM_AFTER):
                    # A burst of appends is over (a backlog stored): what its requests
                    # and rows freed goes back to the kernel. Ingest's appends do not
                    # pass the store's write queue, which trims after its own bursts.
                    trimmed = True
                    trim_malloc()
        finally:
            for task in list(committing):
                task.cancel()
            await asyncio.gather(*committing, return_exceptions=True)

    async def _commit_batch(self, commit: _Commit) -> None:
        insert = _insert_new_sqlite if self._db.is_sqlite else _insert_new_postgresql
        rows: builtins.list[dict[str, Any]] = []

        def take() -> None:
            if not commit.started:
                rows.extend(
                    row for item in commit.take(self._waiting, self._max) for row in item.rows
                )

        def write(conn: Connection) -> tuple[dict[str, int], dict[str, int]]:
            take()
            if not rows:  # what it was queued for went with the commit before it
                return {}, {}
            # Attempts first: they complete the dedup keys. Then duplicates
            # inside the batch collapse: the first row of a key is inserted.
            assign_attempts(conn, rows)
            firsts: dict[str, dict[str, Any]] = {}
            for row in rows:
                firsts.setdefault(row["dedup_key"], row)
            return insert(conn, builtins.list(firsts.values()))

        def write_alone(conn: Connection) -> tuple[dict[str, int], dict[str, int]] | None:
            take()
            if not rows:
                return {}, {}
            if any(r["operation_state"] == "FAILED_TEMP" for r in rows):
                return None
            return _append_postgresql(conn, rows)

        try:
            # Straight to the database (not the job writes' queue): appends are
            # what Tacker and Kafka wait for. SQLite groups them with whatever
            # else is queued for its writer thread.
            written = None if self._db.is_sqlite else await self._db.write_alone(write_alone)
            if written is None:
                written = (await self._db.write_batch([write]))[0]
            inserted, existing = written
        except asyncio.CancelledError:
            commit.cancelled = True
            for item in commit.batch:
                if not item.future.done():
                    item.future.set_exception(StoreError("event writer stopped"))
            raise
        except Exception as exc:
            err = (
                exc
                if isinstance(exc, StoreError)
                else StoreUnavailable(f"could not store events: {type(exc).__name__}")
            )
            # A transaction that failed before it took anything fails what waits, which
            # it would have taken: the callers answer 503 rather than wait on.
            batch = commit.batch if commit.started else commit.take(self._waiting, self._max)
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(err)
            log.error("event batch failed: %s", err)
            return

        seen: set[str] = set()
        appended: builtins.list[AppendedEvent] = []
        observed: builtins.list[AppendObservation] = []
        observe = bool(self._observers)
        now = time.time()
        for item in commit.batch:
            results: builtins.list[AppendResult] = []
            for row in item.rows:
                key = row["dedup_key"]
                event_id = inserted.get(key)
                fresh = event_id is not None and key not in seen
                seen.add(key)
                if event_id is None:
                    event_id = existing.get(key, 0)
                results.append(AppendResult(event_id, not fresh))
                if fresh and row["status"] == EventStatus.PENDING:
                    appended.append(
                        AppendedEvent(
                            event_id,
                            row["vnf_instance_id"],
                            row["source"],
                            row["notification_type"],
                            row["operation"],
                            row["operation_state"],
                            row["received_at"],
                        )
                    )
                if observe:
                    observed.append(
                        AppendObservation(
                            row["source"],
                            row["notification_type"],
                            row["operation_state"],
                            not fresh,
                            now - row["received_at"],
                        )
                    )
            if not item.future.done():
                item.future.set_result(results)
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
        Its timeStamp is not when it happened, so it joins the op-occ's newest
        attempt rather than open one.
        """
        values = {
            **_row_values(new, time.time()),
            "status": status,
            "status_detail": detail,
            "notified_at": None,
        }
        results = await self._enqueue([values])
        return results[0]

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

    async def get_many(self, event_ids: Sequence[int]) -> builtins.list[EventRow]:
        """The events with these ids that exist, in id order (unknown ids are left out)."""
        q = sa.select(events).where(events.c.id.in_(sorted(set(event_ids)))).order_by(events.c.id)
        rows = await self._db.read(lambda conn: conn.execute(q).mappings().all())
        return [EventRow.from_mapping(r) for r in rows]

    async def of_op_occ(self, op_occ_id: str, state: str) -> builtins.list[EventRow]:
        """The op-occ's events in ``state``, newest first."""
        q = (
            sa.select(events)
            .where(events.c.vnf_lcm_op_occ_id == op_occ_id, events.c.operation_state == state)
            .order_by(events.c.id.desc())
        )
        rows = await self._db.read(lambda conn: conn.execute(q).mappings().all())
        return [EventRow.from_mapping(r) for r in rows]

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
        """Every lane (vnfInstanceId) that has pending, running or retrying events, the
        lane of the oldest such event first."""
        q = (
            sa.select(events.c.vnf_instance_id)
            .where(events.c.status.in_(EventStatus.OPEN))
            .group_by(events.c.vnf_instance_id)
            .order_by(sa.func.min(events.c.id))
        )
        rows = await self._db.read(lambda conn: conn.execute(q).all())
        return [r[0] for r in rows if r[0] is not None]

    async def queue_stats(self) -> QueueStats:
        """Events by status, the longest lane's open events, the newest receipt, the lanes past
        their lease and the hooks waiting, in one read."""
        by_status_q = sa.select(events.c.status, sa.func.count()).group_by(events.c.status)
        longest_q = (
            sa.select(sa.func.count())
            .where(events.c.status.in_(EventStatus.OPEN))
            .group_by(events.c.vnf_instance_id)
            .order_by(sa.func.count().desc())
            .limit(1)
        )
        newest_q = sa.select(sa.func.max(events.c.received_at))
        now = time.time()
        # A live holder renews its lease well before it expires; a released one is
        # expired (0). Either way a running event's lane without one is held by nobody.
        past_lease_q = (
            sa.select(sa.func.count(sa.distinct(events.c.vnf_instance_id)))
            .select_from(events.outerjoin(leases, leases.c.lane == events.c.vnf_instance_id))
            .where(
                events.c.status == EventStatus.RUNNING,
                sa.or_(leases.c.lane.is_(None), leases.c.expires_at < now),
            )
        )
        # A hook request is kept under hook:<op-occ>:<state> (schemas.hooks.hook_key), its
        # time the request's (Tacker's retry of the operation asks again, and waits anew).
        hook_key = sa.literal("hook:") + events.c.vnf_lcm_op_occ_id + ":" + events.c.operation_state
        hooks_q = (
            sa.select(sa.func.count(sa.distinct(kv.c.key)), sa.func.min(kv.c.updated_at))
            .select_from(events.join(kv, kv.c.key == hook_key))
            .where(events.c.status.in_(EventStatus.OPEN))
        )

        def read(conn: Connection) -> QueueStats:
            by_status = {r[0]: int(r[1]) for r in conn.execute(by_status_q).all()}
            longest = conn.execute(longest_q).scalar()
            newest = conn.execute(newest_q).scalar()
            past_lease = conn.execute(past_lease_q).scalar()
            waiting, since = conn.execute(hooks_q).one()
            return QueueStats(
                by_status,
                int(longest or 0),
                None if newest is None else float(newest),
                lanes_past_lease=int(past_lease or 0),
                hooks_waiting=int(waiting or 0),
                oldest_hook_since=None if since is None else float(since),
            )

        return await self._db.read(read)

    async def lane_snapshot(self, lane: str) -> LaneSnapshot:
        """Everything the dispatcher needs to pick a lane's next event, in one read."""
        return await self._db.read(self.lane_snapshot_read(lane))

    @staticmethod
    def lane_snapshot_read(lane: str) -> Callable[[Connection], LaneSnapshot]:
        """:meth:`lane_snapshot` as an operation, to run in another transaction
        (:meth:`~subscriber.store.leases.LeaseStore.acquire_and_read`)."""

        def read(conn: Connection) -> LaneSnapshot:
            rows = [
                EventRow.from_mapping(r)
                for r in conn.execute(st.LANE_OPEN_EVENTS, {"b_lane": lane}).mappings().all()
            ]
            ids = sorted({e.vnf_lcm_op_occ_id for e in rows if e.vnf_lcm_op_occ_id})
            states: builtins.list[tuple[str, int, str, int, int]] = []
            if ids:
                states = [
                    (r[0], r[1], r[2], r[3], r[4])
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

        return read

    async def set_status(
        self,
        event_id: int,
        status: str,
        detail: str | None = None,
        *,
        fence: Fence | None = None,
    ) -> None:
        """Set an event's status; with ``fence``, only while that lane lease is held."""
        args = {
            "b_event_id": event_id,
            "b_status": status,
            "b_detail": detail,
            "b_now": time.time(),
        }

        def write(conn: Connection) -> None:
            conn.execute(st.SET_EVENT_STATUS, args)

        await self._writer.run(fenced(fence, write))
