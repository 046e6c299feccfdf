"""The runner: runs one event's job through its plan, checkpointing every step.

A job resumes at the first step not done. A non-idempotent step found still
``running`` (the process died or was stopped mid-step) is never re-run: the
job fails with :class:`~subscriber.errors.StepInterrupted` and waits for an
operator (``replay --mode anew`` once they have checked the node).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from handlers import HandlerRegistry, JobContext, Plan, RetryClass, SkipStep, Step
from schemas import NotificationParseError, parse_notification
from subscriber.config import DispatchSettings
from subscriber.errors import LccnError, StepInterrupted
from subscriber.logs import EventLogAdapter
from subscriber.redact import redact_text
from subscriber.store import EventRow, EventStatus, JobStatus, StepStatus, Store
from subscriber.store.jobs import JobRow, StepOutcome, StepRow

__all__ = ["JobOutcome", "Runner", "classify"]

log = logging.getLogger(__name__)


class JobOutcome(enum.Enum):
    DONE = "done"
    RETRY = "retry"
    FAILED = "failed"
    IGNORED = "ignored"


@dataclass(frozen=True, slots=True)
class _Failure:
    retriable: bool
    error_class: str
    message: str


def classify(exc: BaseException, retry: RetryClass) -> _Failure:
    """Decide whether a step failure is worth another attempt."""
    if isinstance(exc, LccnError):
        retriable, error_class = exc.retriable, exc.error_class
    elif isinstance(exc, (TimeoutError, OSError)):
        retriable, error_class = True, "transient"
    else:
        retriable, error_class = False, "permanent"
    if retry is RetryClass.NEVER:
        retriable = False
    elif retry is RetryClass.ALWAYS:
        retriable = True
    message = str(exc) or type(exc).__name__
    return _Failure(retriable, error_class, redact_text(message))


class _StepFailed(Exception):
    def __init__(self, step: str, failure: _Failure) -> None:
        super().__init__(failure.message)
        self.step = step
        self.failure = failure


class Runner:
    """Runs jobs; one call of :meth:`run` per event taken from a lane."""

    def __init__(
        self,
        store: Store,
        registry: HandlerRegistry,
        settings: DispatchSettings,
        services: Mapping[str, Any] | None = None,
    ) -> None:
        self._store = store
        self._registry = registry
        self._settings = settings
        self._services: Mapping[str, Any] = services or {}

    def backoff(self, attempts: int) -> float:
        """Exponential backoff with jitter for the ``attempts``-th failure."""
        growth: float = self._settings.backoff_initial * 2.0 ** max(0, attempts - 1)
        base = min(self._settings.backoff_max, growth)
        return base * random.uniform(0.5, 1.0)

    async def run(self, event: EventRow) -> JobOutcome:
        """Run (or resume) the job of ``event`` until it is done, retrying or failed."""
        try:
            notification = parse_notification(event.body)
        except NotificationParseError as exc:
            await self._store.events.set_status(
                event.id, EventStatus.FAILED, f"stored body no longer parses: {exc.detail}"
            )
            return JobOutcome.FAILED
        handler = self._registry.route(notification)
        if handler is None:
            await self._store.events.set_status(event.id, EventStatus.IGNORED, "no handler")
            return JobOutcome.IGNORED

        job, stored_steps = await self._store.jobs.resume_state(event.id)
        if job is None or job.status not in (JobStatus.RUNNING, JobStatus.RETRY):
            job = await self._store.jobs.create(event.id, handler.name, "live", EventStatus.RUNNING)
            stored_steps = []
            mode = "live"
        else:
            mode = "resume"
            await self._store.events.set_status(event.id, EventStatus.RUNNING)
        adapter = EventLogAdapter(
            log,
            {
                "event_id": event.id,
                "job_id": job.id,
                "vnfInstanceId": event.vnf_instance_id,
                "vnfLcmOpOccId": event.vnf_lcm_op_occ_id,
            },
        )
        ctx = JobContext(
            event_id=event.id,
            job_id=job.id,
            attempt=job.attempts + 1,
            mode=job.mode if mode == "resume" else mode,
            notification=notification,
            results={},
            services=self._services,
            log=adapter,
        )
        try:
            plan = await handler.plan(ctx)
            final = await self._run_plan(job, plan, ctx, stored_steps)
        except _StepFailed as failed:
            return await self._record_failure(job, failed.step, failed.failure, adapter)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the handler's planning itself failed
            failure = classify(exc, RetryClass.AUTO)
            return await self._record_failure(job, "(plan)", failure, adapter)
        await asyncio.shield(
            self._store.jobs.update(
                job.id,
                event_id=event.id,
                status=JobStatus.DONE,
                event_status=EventStatus.DONE,
                attempts=job.attempts,
                final_step=final,
            )
        )
        adapter.info("job done", extra={"handler": handler.name, "steps": len(plan)})
        return JobOutcome.DONE

    async def _run_plan(
        self, job: JobRow, plan: Plan, ctx: JobContext, stored_steps: list[StepRow]
    ) -> StepOutcome | None:
        """Run the steps not done yet; return the last step's checkpoint, not yet written.

        The caller writes that one together with the job's outcome (one write
        fewer per job); every other step is checkpointed as it ends.
        """
        stored = {s.name: s for s in stored_steps}
        pending: StepOutcome | None = None
        for idx, step in enumerate(plan):
            row = stored.get(step.name)
            if row is not None and row.status in (StepStatus.DONE, StepStatus.SKIPPED):
                ctx.results[step.name] = row.result_json()
                continue
            if pending is not None:
                await asyncio.shield(self._store.jobs.step_finished(job.id, pending))
                pending = None
            started_at = time.time()
            if row is not None and row.status == StepStatus.RUNNING and not step.idempotent:
                msg = (
                    f"step {step.name!r} was interrupted while running and is not "
                    "idempotent; its effect is unknown, so it is not run again"
                )
                outcome = StepOutcome(
                    idx, step.name, False, StepStatus.FAILED, started_at, error=msg
                )
                await asyncio.shield(self._store.jobs.step_finished(job.id, outcome))
                raise _StepFailed(step.name, _Failure(False, StepInterrupted.error_class, msg))
            if not step.idempotent:
                # Durable before any side effect: after a crash we must know it began.
                await asyncio.shield(
                    self._store.jobs.step_started(job.id, idx, step.name, step.idempotent)
                )
            pending = await self._run_step(job, idx, step, ctx, started_at)
        return pending

    async def _run_step(
        self, job: JobRow, idx: int, step: Step, ctx: JobContext, started_at: float
    ) -> StepOutcome:
        def outcome(status: str, **kw: Any) -> StepOutcome:
            return StepOutcome(idx, step.name, step.idempotent, status, started_at, **kw)

        try:
            result = await asyncio.wait_for(step.run(ctx), step.timeout)
        except SkipStep as skip:
            ctx.results[step.name] = skip.result
            ctx.log.info("step skipped", extra={"step": step.name, "reason": skip.reason})
            return outcome(StepStatus.SKIPPED, output=skip.reason, result=skip.result)
        except asyncio.CancelledError:
            # Left "running" on purpose: the next start decides from idempotency.
            raise
        except TimeoutError as exc:
            if step.idempotent:
                failure = _Failure(True, "timeout", f"step timed out after {step.timeout:g}s")
            else:
                failure = _Failure(
                    False,
                    StepInterrupted.error_class,
                    f"step timed out after {step.timeout:g}s and is not idempotent; "
                    "its effect is unknown",
                )
            await asyncio.shield(
                self._store.jobs.step_finished(
                    job.id, outcome(StepStatus.FAILED, error=failure.message)
                )
            )
            raise _StepFailed(step.name, failure) from exc
        except Exception as exc:
            failure = classify(exc, step.retry)
            failed = outcome(
                StepStatus.FAILED, error=failure.message, output=getattr(exc, "output", None)
            )
            await asyncio.shield(self._store.jobs.step_finished(job.id, failed))
            raise _StepFailed(step.name, failure) from exc
        ctx.results[step.name] = result
        ctx.log.debug("step done", extra={"step": step.name, "seconds": time.time() - started_at})
        return outcome(StepStatus.DONE, result=result)

    async def _record_failure(
        self,
        job: JobRow,
        step: str,
        failure: _Failure,
        adapter: logging.LoggerAdapter[logging.Logger],
    ) -> JobOutcome:
        attempts = job.attempts + 1
        message = f"{step}: {failure.message}"
        if failure.retriable and attempts < self._settings.max_attempts:
            delay = self.backoff(attempts)
            await asyncio.shield(
                self._store.jobs.update(
                    job.id,
                    event_id=job.event_id,
                    status=JobStatus.RETRY,
                    event_status=EventStatus.RETRY,
                    attempts=attempts,
                    next_attempt_at=time.time() + delay,
                    error_class=failure.error_class,
                    last_error=message,
                )
            )
            adapter.warning(
                "job failed, will retry",
                extra={
                    "step": step,
                    "attempt": attempts,
                    "retry_in": round(delay, 3),
                    "error": message,
                },
            )
            return JobOutcome.RETRY
        if failure.retriable:
            message = f"{message} (gave up after {attempts} attempts)"
        await asyncio.shield(
            self._store.jobs.update(
                job.id,
                event_id=job.event_id,
                status=JobStatus.FAILED,
                event_status=EventStatus.FAILED,
                attempts=attempts,
                error_class=failure.error_class,
                last_error=message,
            )
        )
        adapter.error("job failed", extra={"step": step, "attempt": attempts, "error": message})
        return JobOutcome.FAILED
