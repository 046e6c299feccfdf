"""The failed-event store: what an operator sees of jobs that ended failed.

Nothing is copied anywhere: a failed event keeps its (redacted) body, every
job that ran for it (attempts, error class, last error) and each step's
checkpoint, with the stdout/stderr tails of a failed SSH command in the step's
``output``. This module selects and presents them (``failed list/show``) and
gives :mod:`subscriber.replay` the same filters.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from subscriber.redact import redact_text
from subscriber.store.tables import EventStatus, StepStatus, events, jobs, steps

__all__ = [
    "OUTPUT_TAIL_CHARS",
    "FailedEvent",
    "FailedFilter",
    "failure_output",
    "parse_time",
    "select_failed",
]

# Per stream, kept in a failed step's output (the SSH executor's tail can be larger).
OUTPUT_TAIL_CHARS = 8192


def failure_output(exc: BaseException) -> str | None:
    """The text to keep in a failed step's ``output``, secrets masked.

    SSH errors (``CommandFailed``, ``CommandTimeout``) carry ``.result`` with
    the tails of stdout and stderr; other errors may carry ``.output``.
    """
    result = getattr(exc, "result", None)
    stdout = getattr(result, "stdout", None)
    stderr = getattr(result, "stderr", None)
    if not isinstance(stdout, str) and not isinstance(stderr, str):
        output = getattr(exc, "output", None)
        return redact_text(output) if isinstance(output, str) and output else None
    parts: list[str] = []
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        if isinstance(text, str) and text.strip():
            parts.append(f"--- {name} (tail) ---\n{text[-OUTPUT_TAIL_CHARS:]}")
    if not parts:
        return None
    joined = "\n".join(parts)
    # The command's own secrets (sudo password, tokens passed as arguments) first.
    redacted = getattr(result, "redacted", None)
    if callable(redacted):
        joined = str(redacted(joined))
    return redact_text(joined)


_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(text: str, *, now: float | None = None) -> float:
    """A point in time: ``2h``/``30m``/``7d`` ago, an ISO 8601 date/time, or epoch seconds.

    Raises:
        ValueError: none of these.
    """
    text = text.strip()
    now = time.time() if now is None else now
    m = _RELATIVE.match(text)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (use e.g. 2h, 30m, 7d, 2026-11-22T10:00:00Z or epoch seconds)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()  # local time, as an operator typing it means
    return parsed.timestamp()


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


def select_failed(
    conn: Connection, flt: FailedFilter, limit: int | None = None
) -> list[FailedEvent]:
    """The events matching ``flt``, oldest first, each with its newest job (a store read)."""
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
