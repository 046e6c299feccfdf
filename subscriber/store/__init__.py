"""The store: events, jobs and steps, leases; SQLite (default) or PostgreSQL."""

from __future__ import annotations

import asyncio
import enum
from types import TracebackType

from subscriber.config import DatabaseSettings
from subscriber.store.engine import create_engines, is_sqlite
from subscriber.store.events import AppendedEvent, EventStore
from subscriber.store.jobs import JobStore
from subscriber.store.leases import LeaseStore
from subscriber.store.migrate import current_revision, head_revision, upgrade
from subscriber.store.records import AppendResult, EventRow, NewEvent, dedup_key_of
from subscriber.store.tables import EventStatus, JobStatus, StepStatus

__all__ = [
    "AppendResult",
    "AppendedEvent",
    "EventRow",
    "EventStatus",
    "EventStore",
    "JobStatus",
    "JobStore",
    "LeaseStore",
    "NewEvent",
    "StepStatus",
    "Store",
    "dedup_key_of",
]


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


class Store:
    """Owns the engines and the per-table stores.

    Usage::

        async with Store(settings.database) as store:
            await store.events.append(new_event)
    """

    def __init__(self, settings: DatabaseSettings, *, migrate: bool = True) -> None:
        self._settings = settings
        self._migrate = migrate
        self._state = _State.UNOPENED
        self.url = settings.resolved_url()
        self.is_sqlite = is_sqlite(self.url)
        self._write, self._read = create_engines(settings)
        # SQLite has one writer; PostgreSQL needs no in-process serialisation.
        lock = asyncio.Lock() if self.is_sqlite else _NoLock()
        self.events = EventStore(
            self._write, self._read, write_lock=lock, group_commit_max=settings.group_commit_max
        )
        self.jobs = JobStore(self._write, self._read, write_lock=lock)
        self.leases = LeaseStore(self._write, write_lock=lock)

    async def start(self) -> None:
        """Migrate (when asked) and start the event writer."""
        if self._state is not _State.UNOPENED:
            raise RuntimeError(f"Store cannot start: it is {self._state.value}")
        self._state = _State.OPEN
        if self._migrate:
            await upgrade(self._write)
        self.events.start()

    async def stop(self) -> None:
        """Flush pending appends and close the engines (idempotent)."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        await self.events.stop()
        await self._write.dispose()
        if self._read is not self._write:
            await self._read.dispose()

    async def __aenter__(self) -> Store:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def schema_is_current(self) -> bool:
        return await current_revision(self._read) == head_revision()


class _NoLock:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None
