"""Replays and the audit trail: the store side of ``lccn-subscriber replay``.

A replay never runs anything itself. It puts a finished event back to
``pending`` with a ``replay_mode`` marker, so the event goes through its lane
like a live one (never beside another event of the same VNF instance), run by
whichever ``serve`` holds that lane, now or at its next start.

When the runner takes such an event it calls :meth:`ReplayStore.start_job`,
which creates a **new job row** (the failed job stays as it was: its error,
attempts and output tail remain the record of what went wrong):

* ``resume``: the new job inherits the ``done``/``skipped`` steps of the last
  job (same handler only), so it continues at the first step not done;
* ``anew``: the new job has no steps: everything runs again (VMs rebuilt).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from subscriber.redact import redact
from subscriber.store.database import Database
from subscriber.store.jobs import JobRow, StepRow, _job, _step
from subscriber.store.leases import Fence, fenced
from subscriber.store.records import EventRow
from subscriber.store.tables import (
    EventStatus,
    JobStatus,
    ReplayMode,
    StepStatus,
    audit,
    events,
    jobs,
    steps,
)
from subscriber.store.writer import WriteQueue

__all__ = ["REPLAYABLE", "AuditRow", "LaterOpOcc", "ReplayHistory", "ReplayStore"]

# Event statuses a replay may take back to pending: finished ones only. Open
# events (pending/running/retry) belong to their lane; poison has no notification.
REPLAYABLE = (
    EventStatus.FAILED,
    EventStatus.DONE,
    EventStatus.STALE,
    EventStatus.IGNORED,
    EventStatus.ECHO,
)


@dataclass(slots=True)
class AuditRow:
    id: int
    at: float
    actor: str
    action: str
    mode: str | None
    dry_run: bool
    event_ids: list[int]
    detail: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "actor": self.actor,
            "action": self.action,
            "mode": self.mode,
            "dryRun": self.dry_run,
            "eventIds": self.event_ids,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class LaterOpOcc:
    """An op-occ of the same instance stored after an event, at its newest transition."""

    op_occ_id: str
    operation: str | None
    operation_state: str | None
    event_id: int


@dataclass(frozen=True, slots=True)
class ReplayHistory:
    """What a replay preview needs to know of an event's past and of its instance since."""

    last_job: JobRow | None
    last_steps: list[StepRow]  # the last job's step checkpoints, in plan order
    later_op_occs: list[LaterOpOcc]  # in order of their first event after this one


def _later_op_occs(conn: Connection, event: EventRow) -> list[LaterOpOcc]:
    if not event.vnf_instance_id:
        return []
    q = (
        sa.select(
            events.c.id,
            events.c.vnf_lcm_op_occ_id,
            events.c.operation,
            events.c.operation_state,
            events.c.state_rank,
            events.c.op_occ_attempt,
        )
        .where(
            events.c.vnf_instance_id == event.vnf_instance_id,
            events.c.id > event.id,
            events.c.vnf_lcm_op_occ_id.is_not(None),
        )
        .order_by(events.c.id)
    )
    if event.vnf_lcm_op_occ_id:
        q = q.where(events.c.vnf_lcm_op_occ_id != event.vnf_lcm_op_occ_id)
    newest: dict[str, tuple[tuple[int, int], LaterOpOcc]] = {}
    for r in conn.execute(q).all():
        cur = newest.get(r.vnf_lcm_op_occ_id)
        order = (r.op_occ_attempt or 0, r.state_rank or 0)
        if cur is None or order >= cur[0]:
            item = LaterOpOcc(r.vnf_lcm_op_occ_id, r.operation, r.operation_state, r.id)
            newest[r.vnf_lcm_op_occ_id] = (order, item)
    return [item for _, item in newest.values()]


class ReplayStore:
    """Writes replay requests and audit rows; creates replay jobs for the runner."""

    def __init__(self, db: Database, *, writer: WriteQueue) -> None:
        self._db = db
        self._writer = writer

    async def record_audit(
        self,
        *,
        actor: str,
        action: str,
        mode: str | None,
        dry_run: bool,
        event_ids: Sequence[int],
        detail: dict[str, Any] | None = None,
    ) -> int:
        """Append one audit row; returns its id."""
        values = {
            "at": time.time(),
            "actor": actor,
            "action": action,
            "mode": mode,
            "dry_run": dry_run,
            "event_ids": json.dumps(list(event_ids)),
            "detail": json.dumps(redact(detail or {}), separators=(",", ":")),
        }

        def write(conn: Connection) -> int:
            return int(
                conn.execute(audit.insert().values(**values).returning(audit.c.id)).scalar_one()
            )

        return await self._writer.run(write)

    async def update_audit(self, audit_id: int, detail: dict[str, Any]) -> None:
        stmt = (
            audit.update()
            .where(audit.c.id == audit_id)
            .values(detail=json.dumps(redact(detail), separators=(",", ":")))
        )

        def write(conn: Connection) -> None:
            conn.execute(stmt)

        await self._writer.run(write)

    async def audit_list(self, *, limit: int | None = None) -> list[AuditRow]:
        """Audit rows, newest first."""
        q = sa.select(audit).order_by(audit.c.id.desc())
        if limit:
            q = q.limit(limit)
        rows = await self._db.read(lambda conn: conn.execute(q).mappings().all())
        return [
            AuditRow(
                r["id"],
                r["at"],
                r["actor"],
                r["action"],
                r["mode"],
                bool(r["dry_run"]),
                json.loads(r["event_ids"]),
                json.loads(r["detail"]) if r["detail"] else {},
            )
            for r in rows
        ]

    async def history(self, event: EventRow) -> ReplayHistory:
        """The event's last job with its steps, and the op-occs its instance ran since, in one read.

        A later op-occ is one of the same VNF instance with an event stored
        after this one (this event's own op-occ excluded), shown at its newest
        transition (highest attempt, then state).
        """

        def read(conn: Connection) -> ReplayHistory:
            row = (
                conn.execute(
                    sa.select(jobs)
                    .where(jobs.c.event_id == event.id)
                    .order_by(jobs.c.id.desc())
                    .limit(1)
                )
                .mappings()
                .first()
            )
            last = _job(row) if row is not None else None
            step_rows: list[StepRow] = []
            if last is not None:
                step_rows = [
                    _step(r)
                    for r in conn.execute(
                        sa.select(steps).where(steps.c.job_id == last.id).order_by(steps.c.idx)
                    )
                    .mappings()
                    .all()
                ]
            return ReplayHistory(last, step_rows, _later_op_occs(conn, event))

        return await self._db.read(read)

    async def request(self, event_ids: Sequence[int], mode: str) -> list[int]:
        """Put finished events back to pending with the replay marker, in one transaction.

        Only events whose status is in :data:`REPLAYABLE` at write time are
        changed (the check and the update are one statement, so an event that
        a lane took meanwhile is left alone).

        Returns:
            the ids actually queued for replay.

        Raises:
            ValueError: ``mode`` is not a :class:`ReplayMode`.
        """
        if mode not in ReplayMode.ALL:
            raise ValueError(f"unknown replay mode {mode!r}")
        ids = list(event_ids)
        now = time.time()
        stmt = (
            events.update()
            .where(events.c.id.in_(ids), events.c.status.in_(REPLAYABLE))
            .values(
                status=EventStatus.PENDING,
                replay_mode=mode,
                status_detail=f"replay ({mode}) requested",
                updated_at=now,
            )
            .returning(events.c.id)
        )

        def write(conn: Connection) -> list[int]:
            return sorted(int(r[0]) for r in conn.execute(stmt).all())

        return await self._writer.run(write)

    async def start_job(
        self, event_id: int, handler: str, mode: str, *, fence: Fence | None = None
    ) -> tuple[JobRow, list[StepRow]]:
        """Create the replay job of ``event_id`` and mark the event running, in one transaction.

        ``resume`` copies the last job's done/skipped steps (when it ran the
        same handler); ``anew`` copies nothing. The event's replay marker is
        cleared in the same transaction, so a crash right after leaves an
        ordinary running job that the next start resumes.

        Returns:
            the new job and its inherited step checkpoints.
        """
        now = time.time()

        def write(conn: Connection) -> tuple[JobRow, list[StepRow]]:
            last = (
                conn.execute(
                    sa.select(jobs)
                    .where(jobs.c.event_id == event_id)
                    .order_by(jobs.c.id.desc())
                    .limit(1)
                )
                .mappings()
                .first()
            )
            job_id = int(
                conn.execute(
                    jobs.insert()
                    .values(
                        event_id=event_id,
                        handler=handler,
                        mode=mode,
                        status=JobStatus.RUNNING,
                        attempts=0,
                        created_at=now,
                        updated_at=now,
                    )
                    .returning(jobs.c.id)
                ).scalar_one()
            )
            if mode == ReplayMode.RESUME and last is not None and last["handler"] == handler:
                done = (
                    conn.execute(
                        sa.select(steps)
                        .where(
                            steps.c.job_id == last["id"],
                            steps.c.status.in_((StepStatus.DONE, StepStatus.SKIPPED)),
                        )
                        .order_by(steps.c.idx)
                    )
                    .mappings()
                    .all()
                )
                if done:
                    conn.execute(
                        steps.insert(),
                        [
                            {
                                "job_id": job_id,
                                "idx": s["idx"],
                                "name": s["name"],
                                "idempotent": s["idempotent"],
                                "status": s["status"],
                                "attempts": s["attempts"],
                                "started_at": s["started_at"],
                                "finished_at": s["finished_at"],
                                "error": None,
                                "output": s["output"],
                                "result": s["result"],
                            }
                            for s in done
                        ],
                    )
            conn.execute(
                events.update()
                .where(events.c.id == event_id)
                .values(
                    status=EventStatus.RUNNING,
                    status_detail=None,
                    replay_mode=None,
                    updated_at=now,
                )
            )
            job = _job(conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).mappings().one())
            inherited = [
                _step(r)
                for r in conn.execute(
                    sa.select(steps).where(steps.c.job_id == job_id).order_by(steps.c.idx)
                )
                .mappings()
                .all()
            ]
            return job, inherited

        return await self._writer.run(fenced(fence, write, live=True))
