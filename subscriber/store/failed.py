"""The failed-event query: events that ended failed, each with its newest job's outcome.

Nothing is copied anywhere when a job fails: the event keeps its (redacted)
body, every job that ran for it and each step's checkpoint. This module is the
read behind ``failed list`` and the filters of ``replay``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from subscriber.store.database import Database
from subscriber.store.tables import EventStatus, StepStatus, events, jobs, steps

__all__ = ["FailedEvent", "FailedFilter", "FailedStore"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedFilter:
    """Which failed events (all fields optional; ``state`` is the operationState)."""

    instance: str | None = None
    operation: str | None = None
    state: str | None = None
    since: float | None = None
    until: float | None = None
    error_class: str | None = None
    statuses: tuple[str, ...] = (EventStatus.FAILED,)

    def is_empty(self) -> bool:
        """Whether no field narrows the selection (``statuses`` aside)."""
        return not any(
            (self.instance, self.operation, self.state, self.since, self.until, self.error_class)
        )


@dataclass(frozen=True, slots=True)
class FailedEvent:
    """A failed event with its newest job's outcome."""

    event_id: int
    received_at: float
    status: str
    vnf_instance_id: str | None
    vnf_lcm_op_occ_id: str | None
    operation: str | None
    operation_state: str | None
    job_id: int | None
    handler: str | None
    mode: str | None
    attempts: int | None
    error_class: str | None
    failed_step: str | None
    last_error: str | None

    def as_json(self) -> dict[str, Any]:
        """The JSON shape of ``failed list --format json``."""
        return {
            "id": self.event_id,
            "receivedAt": self.received_at,
            "status": self.status,
            "vnfInstanceId": self.vnf_instance_id,
            "vnfLcmOpOccId": self.vnf_lcm_op_occ_id,
            "operation": self.operation,
            "operationState": self.operation_state,
            "jobId": self.job_id,
            "handler": self.handler,
            "mode": self.mode,
            "attempts": self.attempts,
            "errorClass": self.error_class,
            "failedStep": self.failed_step,
            "lastError": self.last_error,
        }


def _query(flt: FailedFilter, limit: int | None) -> sa.Select[Any]:
    newest = (
        sa.select(jobs.c.event_id, sa.func.max(jobs.c.id).label("job_id"))
        .group_by(jobs.c.event_id)
        .subquery("newest")
    )
    failed_step = (
        sa.select(steps.c.name)
        .where(steps.c.job_id == jobs.c.id, steps.c.status == StepStatus.FAILED)
        .order_by(steps.c.idx)
        .limit(1)
        .scalar_subquery()
    )
    q = (
        sa.select(
            events.c.id,
            events.c.received_at,
            events.c.status,
            events.c.vnf_instance_id,
            events.c.vnf_lcm_op_occ_id,
            events.c.operation,
            events.c.operation_state,
            jobs.c.id.label("job_id"),
            jobs.c.handler,
            jobs.c.mode,
            jobs.c.attempts,
            jobs.c.error_class,
            jobs.c.last_error,
            failed_step.label("failed_step"),
        )
        .select_from(
            events.outerjoin(newest, newest.c.event_id == events.c.id).outerjoin(
                jobs, jobs.c.id == newest.c.job_id
            )
        )
        .where(events.c.status.in_(flt.statuses))
        .order_by(events.c.id)
    )
    if flt.instance:
        q = q.where(events.c.vnf_instance_id == flt.instance)
    if flt.operation:
        q = q.where(events.c.operation == flt.operation.upper())
    if flt.state:
        q = q.where(events.c.operation_state == flt.state.upper())
    if flt.since is not None:
        q = q.where(events.c.received_at >= flt.since)
    if flt.until is not None:
        q = q.where(events.c.received_at < flt.until)
    if flt.error_class:
        q = q.where(jobs.c.error_class == flt.error_class)
    if limit:
        q = q.limit(limit)
    return q


class FailedStore:
    """Reads of failed events (no writes: a replay goes through the replay store)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def select(self, flt: FailedFilter, *, limit: int | None = None) -> list[FailedEvent]:
        """The events matching ``flt``, oldest first, each with its newest job.

        Arguments:
            flt: which events; ``statuses`` defaults to failed ones.
            limit: at most this many (None or 0: all).

        Returns:
            one :class:`FailedEvent` per event; job fields are None for an
            event that never had a job.
        """
        q = _query(flt, limit)

        def read(conn: Connection) -> list[FailedEvent]:
            return [
                FailedEvent(
                    r.id,
                    r.received_at,
                    r.status,
                    r.vnf_instance_id,
                    r.vnf_lcm_op_occ_id,
                    r.operation,
                    r.operation_state,
                    r.job_id,
                    r.handler,
                    r.mode,
                    r.attempts,
                    r.error_class,
                    r.failed_step,
                    r.last_error,
                )
                for r in conn.execute(q).all()
            ]

        return await self._db.read(read)
