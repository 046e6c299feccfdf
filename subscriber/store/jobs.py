"""Jobs (one handler run for an event) and their step checkpoints."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from subscriber.redact import redact, redact_text
from subscriber.store.database import Database
from subscriber.store.tables import StepStatus, events, jobs, steps
from subscriber.store.writer import WriteQueue

__all__ = ["JobRow", "JobStore", "StepOutcome", "StepRow"]


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """How a step ended, as checkpointed."""

    idx: int
    name: str
    idempotent: bool
    status: str
    started_at: float
    error: str | None = None
    output: str | None = None
    result: Any = None


@dataclass(slots=True)
class JobRow:
    id: int
    event_id: int
    handler: str
    mode: str
    status: str
    attempts: int
    next_attempt_at: float | None
    error_class: str | None
    last_error: str | None
    created_at: float
    updated_at: float


@dataclass(slots=True)
class StepRow:
    id: int
    job_id: int
    idx: int
    name: str
    idempotent: bool
    status: str
    attempts: int
    started_at: float | None
    finished_at: float | None
    error: str | None
    output: str | None
    result: str | None

    def result_json(self) -> Any:
        return json.loads(self.result) if self.result else None


def _job(row: Any) -> JobRow:
    return JobRow(**{k: row[k] for k in JobRow.__slots__})


def _step(row: Any) -> StepRow:
    return StepRow(**{k: row[k] for k in StepRow.__slots__})


class JobStore:
    """Persistence of jobs and step checkpoints (all text redacted before it is written)."""

    def __init__(self, db: Database, *, writer: WriteQueue) -> None:
        self._db = db
        self._writer = writer

    async def create(self, event_id: int, handler: str, mode: str, event_status: str) -> JobRow:
        """Create a job for ``event_id`` and set the event's status, in one transaction."""
        now = time.time()

        def write(conn: Connection) -> int:
            job_id = (
                conn.execute(
                    jobs.insert()
                    .values(
                        event_id=event_id,
                        handler=handler,
                        mode=mode,
                        status="running",
                        attempts=0,
                        created_at=now,
                        updated_at=now,
                    )
                    .returning(jobs.c.id)
                )
            ).scalar_one()
            conn.execute(
                events.update()
                .where(events.c.id == event_id)
                .values(status=event_status, status_detail=None, updated_at=now)
            )
            return int(job_id)

        job_id = await self._writer.run(write)
        return JobRow(job_id, event_id, handler, mode, "running", 0, None, None, None, now, now)

    async def current(self, event_id: int) -> JobRow | None:
        """The newest job of an event."""
        q = sa.select(jobs).where(jobs.c.event_id == event_id).order_by(jobs.c.id.desc()).limit(1)
        row = await self._db.read(lambda conn: conn.execute(q).mappings().first())
        return _job(row) if row else None

    async def resume_state(self, event_id: int) -> tuple[JobRow | None, list[StepRow]]:
        """The newest job of an event and its step checkpoints, in one read."""
        q = sa.select(jobs).where(jobs.c.event_id == event_id).order_by(jobs.c.id.desc()).limit(1)

        def read(conn: Connection) -> tuple[JobRow | None, list[StepRow]]:
            row = conn.execute(q).mappings().first()
            if row is None:
                return None, []
            sq = sa.select(steps).where(steps.c.job_id == row["id"]).order_by(steps.c.idx)
            return _job(row), [_step(r) for r in conn.execute(sq).mappings().all()]

        return await self._db.read(read)

    async def get(self, job_id: int) -> JobRow | None:
        q = sa.select(jobs).where(jobs.c.id == job_id)
        row = await self._db.read(lambda conn: conn.execute(q).mappings().first())
        return _job(row) if row else None

    async def for_event(self, event_id: int) -> list[JobRow]:
        q = sa.select(jobs).where(jobs.c.event_id == event_id).order_by(jobs.c.id)
        rows = await self._db.read(lambda conn: conn.execute(q).mappings().all())
        return [_job(r) for r in rows]

    async def steps(self, job_id: int) -> list[StepRow]:
        q = sa.select(steps).where(steps.c.job_id == job_id).order_by(steps.c.idx)
        rows = await self._db.read(lambda conn: conn.execute(q).mappings().all())
        return [_step(r) for r in rows]

    async def update(
        self,
        job_id: int,
        *,
        event_id: int,
        status: str,
        event_status: str,
        attempts: int | None = None,
        next_attempt_at: float | None = None,
        error_class: str | None = None,
        last_error: str | None = None,
        final_step: StepOutcome | None = None,
    ) -> None:
        """Set a job's outcome and its event's status together.

        ``final_step`` checkpoints the job's last step in the same write.
        """
        now = time.time()
        values: dict[str, Any] = {
            "status": status,
            "next_attempt_at": next_attempt_at,
            "error_class": error_class,
            "last_error": redact_text(last_error) if last_error else None,
            "updated_at": now,
        }
        if attempts is not None:
            values["attempts"] = attempts
        detail = values["last_error"]
        job_stmt = jobs.update().where(jobs.c.id == job_id).values(**values)
        event_stmt = (
            events.update()
            .where(events.c.id == event_id)
            .values(status=event_status, status_detail=detail, updated_at=now)
        )
        step_write = self._step_write(job_id, final_step) if final_step else None

        def write(conn: Connection) -> None:
            if step_write is not None:
                step_write(conn)
            conn.execute(job_stmt)
            conn.execute(event_stmt)

        await self._writer.run(write)

    async def step_started(self, job_id: int, idx: int, name: str, idempotent: bool) -> None:
        """Checkpoint: the step is about to run (written before any side effect)."""
        now = time.time()

        def write(conn: Connection) -> None:
            res = conn.execute(
                steps.update()
                .where(steps.c.job_id == job_id, steps.c.name == name)
                .values(
                    status=StepStatus.RUNNING,
                    attempts=steps.c.attempts + 1,
                    started_at=now,
                    finished_at=None,
                    error=None,
                    idx=idx,
                )
            )
            if res.rowcount == 0:
                conn.execute(
                    steps.insert().values(
                        job_id=job_id,
                        idx=idx,
                        name=name,
                        idempotent=idempotent,
                        status=StepStatus.RUNNING,
                        attempts=1,
                        started_at=now,
                    )
                )

        await self._writer.run(write)

    async def step_finished(self, job_id: int, outcome: StepOutcome) -> None:
        """Checkpoint: a step's outcome (``done``, ``skipped`` or ``failed``)."""
        await self._writer.run(self._step_write(job_id, outcome))

    @staticmethod
    def _step_write(job_id: int, outcome: StepOutcome) -> Callable[[Connection], None]:
        # Idempotent steps get no "running" checkpoint (a crash just re-runs
        # them), so their row may not exist yet: update, else insert.
        values = {
            "status": outcome.status,
            "finished_at": time.time(),
            "error": redact_text(outcome.error) if outcome.error else None,
            "output": redact_text(outcome.output) if outcome.output else None,
            "result": json.dumps(redact(outcome.result)) if outcome.result is not None else None,
        }
        update = (
            steps.update()
            .where(steps.c.job_id == job_id, steps.c.name == outcome.name)
            .values(
                **values,
                attempts=sa.case(
                    (steps.c.status == StepStatus.RUNNING, steps.c.attempts),
                    else_=steps.c.attempts + 1,
                ),
            )
        )
        insert = steps.insert().values(
            job_id=job_id,
            idx=outcome.idx,
            name=outcome.name,
            idempotent=outcome.idempotent,
            attempts=1,
            started_at=outcome.started_at,
            **values,
        )

        def write(conn: Connection) -> None:
            if not conn.execute(update).rowcount:
                conn.execute(insert)

        return write
