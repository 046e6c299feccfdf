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
from subscriber.store import statements as st
from subscriber.store.database import Database
from subscriber.store.leases import Fence, fenced, release_write
from subscriber.store.tables import jobs, steps
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

    async def create(
        self,
        event_id: int,
        handler: str,
        mode: str,
        event_status: str,
        *,
        fence: Fence | None = None,
    ) -> JobRow:
        """Create a job for ``event_id`` and set the event's status, in one transaction.

        Every write of this class takes ``fence``: given, the write happens only
        while that lease is still held (else :class:`~subscriber.errors.LeaseLost`).
        """
        now = time.time()
        job = {"b_event_id": event_id, "b_handler": handler, "b_mode": mode, "b_now": now}
        event = {"b_event_id": event_id, "b_status": event_status, "b_detail": None, "b_now": now}

        def write(conn: Connection) -> int:
            job_id = conn.execute(st.INSERT_JOB, job).scalar_one()
            conn.execute(st.SET_EVENT_STATUS, event)
            return int(job_id)

        job_id = await self._writer.run(fenced(fence, write, live=True))
        return JobRow(job_id, event_id, handler, mode, "running", 0, None, None, None, now, now)

    async def current(self, event_id: int) -> JobRow | None:
        """The newest job of an event."""
        args = {"b_event_id": event_id}
        row = await self._db.read(lambda conn: conn.execute(st.NEWEST_JOB, args).mappings().first())
        return _job(row) if row else None

    async def resume_state(self, event_id: int) -> tuple[JobRow | None, list[StepRow]]:
        """The newest job of an event and its step checkpoints, in one read."""

        def read(conn: Connection) -> tuple[JobRow | None, list[StepRow]]:
            row = conn.execute(st.NEWEST_JOB, {"b_event_id": event_id}).mappings().first()
            if row is None:
                return None, []
            rows = conn.execute(st.JOB_STEPS, {"b_job_id": row["id"]}).mappings().all()
            return _job(row), [_step(r) for r in rows]

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
        fence: Fence | None = None,
        release: bool = False,
    ) -> None:
        """Set a job's outcome and its event's status together.

        ``final_step`` checkpoints the job's last step in the same write; ``release``
        (with ``fence``) lets the lane's lease go in it too.
        """
        now = time.time()
        detail = redact_text(last_error) if last_error else None
        job = {
            "b_job_id": job_id,
            "b_status": status,
            "b_next_attempt_at": next_attempt_at,
            "b_error_class": error_class,
            "b_last_error": detail,
            "b_now": now,
            "b_attempts": attempts,
        }
        event = {"b_event_id": event_id, "b_status": event_status, "b_detail": detail, "b_now": now}
        step_write = self._step_write(job_id, final_step) if final_step else None
        release_op = release_write(fence) if release and fence is not None else None

        def write(conn: Connection) -> None:
            if step_write is not None:
                step_write(conn)
            conn.execute(st.UPDATE_JOB, job)
            conn.execute(st.SET_EVENT_STATUS, event)
            if release_op is not None:
                release_op(conn)

        await self._writer.run(fenced(fence, write))

    async def step_started(
        self, job_id: int, idx: int, name: str, idempotent: bool, *, fence: Fence | None = None
    ) -> None:
        """Checkpoint: the step is about to run (written before any side effect).

        Fenced, it is also the decision to start: refused unless the lease is
        held with ``fence``'s token and not expired.
        """
        args = {
            "b_job_id": job_id,
            "b_idx": idx,
            "b_name": name,
            "b_idempotent": idempotent,
            "b_now": time.time(),
        }

        def write(conn: Connection) -> None:
            if not conn.execute(st.STEP_STARTED_UPDATE, args).rowcount:
                conn.execute(st.STEP_STARTED_INSERT, args)

        await self._writer.run(fenced(fence, write, live=True))

    async def step_finished(
        self, job_id: int, outcome: StepOutcome, *, fence: Fence | None = None
    ) -> None:
        """Checkpoint: a step's outcome (``done``, ``skipped`` or ``failed``)."""
        await self._writer.run(fenced(fence, self._step_write(job_id, outcome)))

    @staticmethod
    def _step_write(job_id: int, outcome: StepOutcome) -> Callable[[Connection], None]:
        # Idempotent steps get no "running" checkpoint (a crash just re-runs
        # them), so their row may not exist yet: update, else insert.
        args = {
            "b_job_id": job_id,
            "b_idx": outcome.idx,
            "b_name": outcome.name,
            "b_idempotent": outcome.idempotent,
            "b_status": outcome.status,
            "b_started_at": outcome.started_at,
            "b_now": time.time(),
            "b_error": redact_text(outcome.error) if outcome.error else None,
            "b_output": redact_text(outcome.output) if outcome.output else None,
            "b_result": json.dumps(redact(outcome.result)) if outcome.result is not None else None,
        }

        def write(conn: Connection) -> None:
            if not conn.execute(st.STEP_FINISHED_UPDATE, args).rowcount:
                conn.execute(st.STEP_FINISHED_INSERT, args)

        return write
