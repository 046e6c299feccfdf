"""The store: events, jobs and steps, leases; SQLite (default) or PostgreSQL."""

from __future__ import annotations

import os

from sqlalchemy.exc import SQLAlchemyError

from schemas.callback_credentials import StoredCredential
from subscriber.config import DatabaseSettings
from subscriber.errors import SchemaTooNew, StoreError, StoreUnavailable
from subscriber.lifecycle import Component
from subscriber.redact import redact_url
from subscriber.store.credentials import CredentialStore
from subscriber.store.database import Database
from subscriber.store.events import AppendedEvent, EventStore, QueueStats
from subscriber.store.failed import FailedEvent, FailedFilter, FailedStore
from subscriber.store.inventory import InventoryStore
from subscriber.store.jobs import JobStore
from subscriber.store.leases import Fence, HeldLease, LeaseStore
from subscriber.store.migrate import HEAD_REVISION, MigrationError, current_revision, upgrade
from subscriber.store.records import AppendResult, EventRow, NewEvent, dedup_key_of
from subscriber.store.replays import LaterOpOcc, ReplayHistory, ReplayStore
from subscriber.store.retention import PruneCounts, RetentionStore
from subscriber.store.tables import EventStatus, JobStatus, ReplayMode, StepStatus
from subscriber.store.tacker_state import TackerStateStore
from subscriber.store.writer import WriteQueue

__all__ = [
    "AppendResult",
    "AppendedEvent",
    "CredentialStore",
    "EventRow",
    "EventStatus",
    "EventStore",
    "FailedEvent",
    "FailedFilter",
    "FailedStore",
    "Fence",
    "HeldLease",
    "InventoryStore",
    "JobStatus",
    "JobStore",
    "LaterOpOcc",
    "LeaseStore",
    "NewEvent",
    "PruneCounts",
    "QueueStats",
    "ReplayHistory",
    "ReplayMode",
    "ReplayStore",
    "RetentionStore",
    "StepStatus",
    "Store",
    "StoredCredential",
    "TackerStateStore",
    "dedup_key_of",
    "schema_revision",
]


def _reason(exc: BaseException) -> str:
    """The first line that says why, from the driver's error or the OS's."""
    seen: list[BaseException] = []
    item: BaseException | None = exc
    while item is not None and item not in seen:
        seen.append(item)
        if isinstance(item, OSError) and (item.errno or item.strerror):
            return (os.strerror(item.errno) if item.errno else str(item.strerror)).lower()
        item = getattr(item, "orig", None) or item.__cause__ or item.__context__
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0].removeprefix("(") if text else type(exc).__name__


def store_open_error(exc: BaseException, url: str) -> StoreError:
    """What opening the store at ``url`` (password masked) failed of, in one line."""
    if isinstance(exc, MigrationError) and exc.too_new:
        return SchemaTooNew(
            f"the store at {url} was migrated by a newer lccn-subscriber ({exc}): "
            "run that version, or a database it has not touched"
        )
    return StoreUnavailable(f"cannot open the store at {url}: {_reason(exc)}")


async def schema_revision(settings: DatabaseSettings) -> str | None:
    """The schema revision of the store ``settings`` names (``None``: not created yet),
    read without opening a :class:`Store`: no writer, no migration, no Alembic.

    Raises:
        StoreUnavailable: the database cannot be reached or refused us.
    """
    db = Database(settings)
    try:
        return await current_revision(db)
    except (SQLAlchemyError, OSError) as exc:
        raise store_open_error(exc, redact_url(db.url)) from exc
    finally:
        await db.dispose()


class Store(Component):
    """Owns the engines and the per-table stores.

    Usage::

        async with Store(settings.database) as store:
            await store.events.append(new_event)
    """

    def __init__(
        self, settings: DatabaseSettings, *, migrate: bool = True, low_priority: bool = False
    ) -> None:
        super().__init__()
        self._settings = settings
        self._migrate = migrate
        # low_priority: this process's writes give way to another's (SQLite: serve's
        # worker gives way to its ingest process, see database._WriteTurn).
        self.db = Database(settings, low_priority=low_priority)
        self.url = self.db.url
        self.is_sqlite = self.db.is_sqlite
        # Every write of the process goes through one writer with group commit.
        self.writer = WriteQueue(self.db, max_batch=settings.group_commit_max)
        self.events = EventStore(
            self.db, writer=self.writer, group_commit_max=settings.group_commit_max
        )
        self.jobs = JobStore(self.db, writer=self.writer)
        self.leases = LeaseStore(self.db, writer=self.writer, lock_timeout=settings.lock_timeout)
        self.replays = ReplayStore(self.db, writer=self.writer)
        self.retention = RetentionStore(self.db, writer=self.writer)
        self.inventory = InventoryStore(self.db, writer=self.writer)
        self.tacker = TackerStateStore(self.db, writer=self.writer)
        self.credentials = CredentialStore(self.db, writer=self.writer)
        self.failed = FailedStore(self.db)

    async def _start(self) -> None:
        # Migrate (when asked), then the writers.
        try:
            if self._migrate:
                await upgrade(self.db)
            else:
                await current_revision(self.db)  # reachable at all
        except (SQLAlchemyError, OSError, MigrationError) as exc:
            raise store_open_error(exc, redact_url(self.db.url)) from exc
        await self.writer.start()
        await self.events.start()

    async def _stop(self) -> None:
        # Flush pending appends, then close the engines (the writers are not
        # children: the engines must close after them).
        await self.events.stop()
        await self.writer.stop()
        await self.db.dispose()

    async def schema_is_current(self) -> bool:
        return await current_revision(self.db) == HEAD_REVISION
