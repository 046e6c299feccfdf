"""Retention: settled events, their jobs and steps, deleted once old enough.

Settled: ``done``, ``ignored``, ``stale``, ``echo``. ``failed`` and ``poison``
events are the operator's (to replay or inspect) and go only when asked
(``include_failed``); open events (pending, running, retry) never go. The age
is that of the event's last change (``updated_at``: when it settled).

The management-driver hooks' requests and sealed answers (``kv`` rows ``hook:...``,
``hook-answer:...``) last written before the same age go with them.

Deletes run in batches of whole events (steps, then jobs, then events, in
one transaction per batch) through the process's writer at job priority, so
ingest is never held up behind a long prune.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from subscriber.store.database import Database
from subscriber.store.tables import EventStatus, events, jobs, kv, steps
from subscriber.store.writer import WriteQueue

__all__ = ["KEPT_UNTIL_ASKED", "SETTLED", "PruneCounts", "RetentionStore"]

SETTLED = (EventStatus.DONE, EventStatus.IGNORED, EventStatus.STALE, EventStatus.ECHO)
KEPT_UNTIL_ASKED = (EventStatus.FAILED, EventStatus.POISON, EventStatus.REJECTED)


@dataclass(frozen=True, slots=True)
class PruneCounts:
    events: int = 0
    jobs: int = 0
    steps: int = 0

    def __add__(self, other: PruneCounts) -> PruneCounts:
        return PruneCounts(
            self.events + other.events, self.jobs + other.jobs, self.steps + other.steps
        )


def _statuses(include_failed: bool) -> tuple[str, ...]:
    return SETTLED + KEPT_UNTIL_ASKED if include_failed else SETTLED


class RetentionStore:
    def __init__(self, db: Database, *, writer: WriteQueue) -> None:
        self._db = db
        self._writer = writer

    async def count(self, before: float, *, include_failed: bool = False) -> PruneCounts:
        """What :meth:`prune` would delete now (a dry run: reads only)."""
        old = sa.and_(events.c.status.in_(_statuses(include_failed)), events.c.updated_at < before)
        old_ids = sa.select(events.c.id).where(old)
        job_ids = sa.select(jobs.c.id).where(jobs.c.event_id.in_(old_ids))

        def read(conn: Connection) -> PruneCounts:
            n_events = conn.execute(sa.select(sa.func.count()).where(old)).scalar_one()
            n_jobs = conn.execute(
                sa.select(sa.func.count()).select_from(jobs).where(jobs.c.event_id.in_(old_ids))
            ).scalar_one()
            n_steps = conn.execute(
                sa.select(sa.func.count()).select_from(steps).where(steps.c.job_id.in_(job_ids))
            ).scalar_one()
            return PruneCounts(int(n_events), int(n_jobs), int(n_steps))

        return await self._db.read(read)

    async def prune(
        self, before: float, *, include_failed: bool = False, batch: int = 500
    ) -> PruneCounts:
        """Delete the events settled before ``before`` (epoch seconds), their jobs and steps.

        Returns:
            how many rows of each went.
        """
        statuses = _statuses(include_failed)
        total = PruneCounts()
        while True:
            done = await self._writer.run(_Batch(statuses, before, batch))
            total += done
            if done.events < batch:
                break
        hooks = sa.or_(kv.c.key.like("hook:%"), kv.c.key.like("hook-answer:%"))
        old_hooks = kv.delete().where(hooks, kv.c.updated_at < before)

        def forget(conn: Connection) -> None:
            conn.execute(old_hooks)

        await self._writer.run(forget)
        return total


@dataclass(frozen=True, slots=True)
class _Batch:
    statuses: tuple[str, ...]
    before: float
    size: int

    def __call__(self, conn: Connection) -> PruneCounts:
        ids = list(
            conn.execute(
                sa.select(events.c.id)
                .where(events.c.status.in_(self.statuses), events.c.updated_at < self.before)
                .order_by(events.c.id)
                .limit(self.size)
                # PostgreSQL: the rows stay as selected (no replay in between),
                # and replicas pruning at once take different rows.
                .with_for_update(skip_locked=True)
            ).scalars()
        )
        if not ids:
            return PruneCounts()
        job_ids = sa.select(jobs.c.id).where(jobs.c.event_id.in_(ids))
        n_steps = conn.execute(steps.delete().where(steps.c.job_id.in_(job_ids))).rowcount
        n_jobs = conn.execute(jobs.delete().where(jobs.c.event_id.in_(ids))).rowcount
        n_events = conn.execute(events.delete().where(events.c.id.in_(ids))).rowcount
        return PruneCounts(int(n_events), int(n_jobs), int(n_steps))
