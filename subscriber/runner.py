"""The runner: runs one event's job through its plan, checkpointing every step.

A job resumes at the first step not done. A non-idempotent step found still
``running`` (the process died or was stopped mid-step) is never re-run: the
job fails with :class:`~subscriber.errors.StepInterrupted` and waits for an
operator (``replay --mode anew`` once they have checked the node).

A replayed event (``replay_mode`` set by ``lccn-subscriber replay``) gets a new
job: ``resume`` inherits the last job's done steps, ``anew`` starts from step
one (see :mod:`subscriber.store.replays`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Protocol

from schemas import Notification, NotificationParseError, parse_notification
from subscriber import tracing
from subscriber.config import DispatchSettings
from subscriber.errors import EndJob, EventRejected, LccnError, LeaseLost, SkipStep, StepInterrupted
from subscriber.failed import failure_output
from subscriber.kernel import (
    Handler,
    JobContext,
    Plan,
    RetryClass,
    RoutingTable,
    Services,
    Step,
)
from subscriber.kernel.results import result_json
from subscriber.logs import EventLogAdapter
from subscriber.metrics import Metrics
from subscriber.redact import redact_text
from subscriber.store import EventRow, EventStatus, HeldLease, JobStatus, StepStatus, Store
from subscriber.store.jobs import JobRow, StepOutcome, StepRow
from subscriber.store.leases import Fence

__all__ = ["EchoCheck", "JobObserver", "JobOutcome", "Runner", "classify"]

log = logging.getLogger(__name__)


class JobOutcome(enum.Enum):
    DONE = "done"
    RETRY = "retry"
    FAILED = "failed"
    IGNORED = "ignored"
    ECHO = "echo"
    REJECTED = "rejected"


class EchoCheck(Protocol):
    """Recognises notifications of our own write-backs (see :mod:`subscriber.tacker.echo`)."""

    async def is_echo(self, notification: Notification) -> bool: ...


class JobObserver(Protocol):
    """Told each job's end once it is written (the ``lccn`` status entry in Tacker)."""

    def job_settled(
        self,
        event: EventRow,
        handler: Handler,
        outcome: JobOutcome,
        *,
        reason: str | None = None,
        ended_early: bool = False,
    ) -> None:
        """``outcome`` is DONE or FAILED; ``reason`` the failure's one line (no secret);
        ``ended_early``: a step ended the job before its last (nothing to do, a CNF, its
        hook already ran it). Must not block: the caller is the job's lane."""
        ...


@dataclass(frozen=True, slots=True)
class _Failure:
    retriable: bool
    error_class: str
    message: str
    rejected: bool = False  # Tacker contradicts the notification (EventRejected)


def _job_attributes(event: EventRow) -> dict[str, str | int]:
    attrs: dict[str, str | int] = {"lccn.event_id": event.id, "lccn.source": event.source}
    for key, value in (
        ("lccn.vnf_instance_id", event.vnf_instance_id),
        ("lccn.vnf_lcm_op_occ_id", event.vnf_lcm_op_occ_id),
        ("lccn.operation", event.operation),
        ("lccn.operation_state", event.operation_state),
    ):
        if value is not None:
            attrs[key] = value
    return attrs


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


def _effect_unknown(exc: BaseException, step: Step) -> bool:
    """Whether ``exc`` cut off work that may have had its effect (a lost SSH connection,
    a remote command past its timeout); a step that says ``RetryClass.ALWAYS`` decides
    for itself."""
    return step.retry is RetryClass.AUTO and getattr(exc, "effect_unknown", False) is True


def _cut_off(row: StepRow, job: JobRow) -> bool:
    """Whether a step's checkpoint says it may have begun its effect and never ended.

    ``running``: the process stopped mid-step. ``failed`` under a job still
    ``running`` (no retry or failure recorded): a store written by a version
    that checkpointed a failed step apart from its job's outcome, stopped
    between the two; whether that failure was worth a retry is unknown.
    """
    if row.status == StepStatus.RUNNING:
        return True
    return row.status == StepStatus.FAILED and job.status == JobStatus.RUNNING


class _JobEnds(Exception):
    """A step ended its job (:class:`~subscriber.errors.EndJob`); ``checkpoint`` is its row."""

    def __init__(self, checkpoint: StepOutcome) -> None:
        super().__init__(checkpoint.name)
        self.checkpoint = checkpoint


class _StepFailed(Exception):
    """A step failed; ``checkpoint`` is its row, written together with the job's outcome."""

    def __init__(self, step: str, failure: _Failure, checkpoint: StepOutcome) -> None:
        super().__init__(failure.message)
        self.step = step
        self.failure = failure
        self.checkpoint = checkpoint


class Runner:
    """Runs jobs; one call of :meth:`run` per event taken from a lane."""

    def __init__(
        self,
        store: Store,
        routing: RoutingTable,
        settings: DispatchSettings,
        services: Services | None = None,
        metrics: Metrics | None = None,
        echo: EchoCheck | None = None,
        observer: JobObserver | None = None,
    ) -> None:
        self._store = store
        self._echo = echo
        self._observer = observer
        self._routing = routing
        self._settings = settings
        self._services = services or Services()
        self._metrics = metrics

    def backoff(self, attempts: int) -> float:
        """Exponential backoff with jitter for the ``attempts``-th failure."""
        growth: float = self._settings.backoff_initial * 2.0 ** max(0, attempts - 1)
        base = min(self._settings.backoff_max, growth)
        return base * random.uniform(0.5, 1.0)

    async def run(self, event: EventRow, lease: HeldLease | None = None) -> JobOutcome:
        """Run (or resume) the job of ``event`` until it is done, retrying or failed.

        Arguments:
            lease: the lane's lease (the dispatcher's); given, every store write
                is fenced with it and no step starts once it is lost or expired.

        Raises:
            LeaseLost: the lease was lost; nothing more was written.
        """
        attrs = _job_attributes(event) if tracing.enabled() else None
        # Continues the trace its ingest began (stored with the event), in this process.
        with tracing.span("job", attrs, parent=event.traceparent) as span:
            outcome, mode = await self._run(event, lease)
            span.set("lccn.outcome", outcome.value)
        if outcome is JobOutcome.ECHO:
            return outcome  # no job ran; counted as a skip
        if self._metrics is not None:
            self._metrics.job_finished(outcome.value, mode)
        return outcome

    async def _run(self, event: EventRow, lease: HeldLease | None) -> tuple[JobOutcome, str]:
        mode = "live"
        fence = lease.fence if lease is not None else None
        try:
            notification = parse_notification(event.body)
        except NotificationParseError as exc:
            await self._store.events.set_status(
                event.id,
                EventStatus.FAILED,
                f"stored body no longer parses: {exc.detail}",
                fence=fence,
            )
            return JobOutcome.FAILED, mode
        # Before routing: our own write-back's MODIFY_INFO never reaches a handler.
        if self._echo is not None and await self._echo.is_echo(notification):
            await self._store.events.set_status(
                event.id, EventStatus.ECHO, "our own write-back (MODIFY_INFO)", fence=fence
            )
            if self._metrics is not None:
                self._metrics.skipped("echo")
            log.info(
                "own echo skipped",
                extra={
                    "event_id": event.id,
                    "vnfInstanceId": event.vnf_instance_id,
                    "vnfLcmOpOccId": event.vnf_lcm_op_occ_id,
                    "operationState": event.operation_state,
                },
            )
            return JobOutcome.ECHO, mode
        handler = self._routing.route(notification)
        if handler is None:
            await self._store.events.set_status(
                event.id, EventStatus.IGNORED, "no handler", fence=fence
            )
            return JobOutcome.IGNORED, mode

        if event.replay_mode and event.status == EventStatus.PENDING:
            # An operator's replay: a new job, with or without the last one's done steps.
            job, stored_steps = await self._store.replays.start_job(
                event.id, handler.name, event.replay_mode, fence=fence
            )
            log.info(
                "replaying event",
                extra={
                    "event_id": event.id,
                    "job_id": job.id,
                    "mode": job.mode,
                    "inherited_steps": [s.name for s in stored_steps],
                    "vnfInstanceId": event.vnf_instance_id,
                    "vnfLcmOpOccId": event.vnf_lcm_op_occ_id,
                },
            )
        else:
            # A pending event has no job to resume (a replay goes through the
            # branch above), so only running/retry events need the read.
            resumed, stored_steps = (
                (None, [])
                if event.status == EventStatus.PENDING
                else await self._store.jobs.resume_state(event.id)
            )
            if resumed is None or resumed.status not in (JobStatus.RUNNING, JobStatus.RETRY):
                job = await self._store.jobs.create(
                    event.id, handler.name, "live", EventStatus.RUNNING, fence=fence
                )
                stored_steps = []
            else:
                job = resumed
                await self._store.events.set_status(event.id, EventStatus.RUNNING, fence=fence)
        mode = job.mode
        ids: dict[str, Any] = {
            "event_id": event.id,
            "job_id": job.id,
            "vnfInstanceId": event.vnf_instance_id,
            "vnfLcmOpOccId": event.vnf_lcm_op_occ_id,
        }
        trace_id = tracing.current_trace_id()
        if trace_id is not None:
            ids["trace_id"] = trace_id
        adapter = EventLogAdapter(log, ids)
        ctx = JobContext(
            event_id=event.id,
            job_id=job.id,
            attempt=job.attempts + 1,
            mode=job.mode,
            notification=notification,
            results={},
            services=self._services,
            log=adapter,
            source=event.source,
        )
        try:
            plan = handler.plan(notification)  # pure: no I/O (see subscriber.kernel.plan)
            final, ended_early = await self._run_plan(job, plan, ctx, stored_steps, lease)
        except _StepFailed as failed:
            failure = failed.failure
            outcome = await self._record_failure(
                job, failed.step, failure, adapter, fence, checkpoint=failed.checkpoint
            )
            self._settled(event, handler, outcome, f"{failed.step}: {failure.message}")
            return outcome, mode
        except (asyncio.CancelledError, LeaseLost):
            raise
        except Exception as exc:  # the handler's planning itself failed
            failure = classify(exc, RetryClass.AUTO)
            outcome = await self._record_failure(job, "(plan)", failure, adapter, fence)
            self._settled(event, handler, outcome, f"(plan): {failure.message}")
            return outcome, mode
        # The lane's last open event: its outcome's write lets the lease go too.
        releasing = lease if lease is not None and lease.last_of_lane else None
        if releasing is not None:
            releasing.release_sent = True
        await asyncio.shield(
            self._store.jobs.update(
                job.id,
                event_id=event.id,
                status=JobStatus.DONE,
                event_status=EventStatus.DONE,
                attempts=job.attempts,
                final_step=final,
                fence=fence,
                release=releasing is not None,
            )
        )
        if releasing is not None:
            releasing.released = True
        adapter.info("job done", extra={"handler": handler.name, "steps": len(ctx.results)})
        self._settled(event, handler, JobOutcome.DONE, None, ended_early=ended_early)
        return JobOutcome.DONE, mode

    def _settled(
        self,
        event: EventRow,
        handler: Handler,
        outcome: JobOutcome,
        reason: str | None,
        *,
        ended_early: bool = False,
    ) -> None:
        if self._observer is None or outcome not in (JobOutcome.DONE, JobOutcome.FAILED):
            return
        try:
            self._observer.job_settled(
                event, handler, outcome, reason=reason, ended_early=ended_early
            )
        except Exception:  # an observer's bug never fails the job it watches
            log.exception("job observer failed", extra={"event_id": event.id})

    async def _run_plan(
        self,
        job: JobRow,
        plan: Plan,
        ctx: JobContext,
        stored_steps: list[StepRow],
        lease: HeldLease | None = None,
    ) -> tuple[StepOutcome | None, bool]:
        """Run the steps not done yet; return the last step's checkpoint, not yet written,
        and whether a step ended the job early (:class:`~subscriber.errors.EndJob`).

        The caller writes that checkpoint together with the job's outcome (one write
        fewer per job); every other step is checkpointed as it ends.
        """
        stored = {s.name: s for s in stored_steps}
        fence = lease.fence if lease is not None else None
        pending: StepOutcome | None = None
        for idx, step in enumerate(plan.steps(ctx.results)):
            row = stored.get(step.name)
            if row is not None and row.status in (StepStatus.DONE, StepStatus.SKIPPED):
                ctx.results[step.name] = row.result_json()
                continue
            if pending is not None:
                await asyncio.shield(self._store.jobs.step_finished(job.id, pending, fence=fence))
                pending = None
            if lease is not None:
                lease.check()  # the decision to start: not once the lease is lost or stale
            started_at = time.time()
            if row is not None and not step.idempotent and _cut_off(row, job):
                msg = (
                    f"step {step.name!r} was interrupted while running and is not "
                    "idempotent; its effect is unknown, so it is not run again"
                )
                outcome = StepOutcome(
                    idx, step.name, False, StepStatus.FAILED, started_at, error=msg
                )
                raise _StepFailed(
                    step.name, _Failure(False, StepInterrupted.error_class, msg), outcome
                )
            if not step.idempotent:
                # Durable before any side effect: after a crash we must know it
                # began. Fenced, it is also the check that the lease is live.
                await asyncio.shield(
                    self._store.jobs.step_started(
                        job.id, idx, step.name, step.idempotent, fence=fence
                    )
                )
            try:
                pending = await self._run_step(job, idx, step, ctx, started_at, lease)
            except _JobEnds as ends:
                return ends.checkpoint, True
        return pending, False

    async def _run_step(
        self,
        job: JobRow,
        idx: int,
        step: Step,
        ctx: JobContext,
        started_at: float,
        lease: HeldLease | None = None,
    ) -> StepOutcome:
        def outcome(status: str, **kw: Any) -> StepOutcome:
            return StepOutcome(idx, step.name, step.idempotent, status, started_at, **kw)

        async def run_checked() -> Any:
            # The last look at the lease, in the step's own task, after its "running"
            # checkpoint: a process paused between that commit and here (SIGSTOP, a
            # frozen VM) wakes past its lease and must not begin the effect, which the
            # lane's new holder has already failed as interrupted.
            if lease is not None:
                lease.check()
            return await step.run(ctx.for_step(step, started_at))

        try:
            # Current while the step runs: its SSH commands and Tacker calls are its children.
            with tracing.span("step", {"lccn.step": step.name} if tracing.enabled() else None):
                done = await asyncio.wait_for(run_checked(), step.timeout)
            result = result_json(done)
        except LeaseLost:
            raise
        except SkipStep as skip:
            self._observe_step(step.name, "skipped", started_at)
            stored = result_json(skip.result)
            ctx.results[step.name] = stored
            ctx.log.info("step skipped", extra={"step": step.name, "reason": skip.reason})
            skipped = outcome(StepStatus.SKIPPED, output=skip.reason, result=stored)
            if isinstance(skip, EndJob):
                raise _JobEnds(skipped) from None
            return skipped
        except EventRejected as rejected:
            self._observe_step(step.name, "rejected", started_at)
            failure = _Failure(False, rejected.error_class, redact_text(str(rejected)), True)
            failed = outcome(StepStatus.FAILED, error=failure.message)
            raise _StepFailed(step.name, failure, failed) from None
        except asyncio.CancelledError:
            # Left "running" on purpose: the next start decides from idempotency.
            raise
        except TimeoutError as exc:
            self._observe_step(step.name, "timeout", started_at)
            if step.idempotent:
                failure = _Failure(True, "timeout", f"step timed out after {step.timeout:g}s")
            else:
                failure = _Failure(
                    False,
                    StepInterrupted.error_class,
                    f"step timed out after {step.timeout:g}s and is not idempotent; "
                    "its effect is unknown",
                )
            failed = outcome(StepStatus.FAILED, error=failure.message)
            raise _StepFailed(step.name, failure, failed) from exc
        except Exception as exc:
            self._observe_step(step.name, "failed", started_at)
            failure = classify(exc, step.retry)
            if not step.idempotent and failure.retriable and _effect_unknown(exc, step):
                # Like a kill mid-step: the effect may be there, so no blind retry.
                failure = _Failure(
                    False,
                    StepInterrupted.error_class,
                    f"{failure.message}; the step is not idempotent and may have begun "
                    "its effect, so it is not retried (check the node, then replay)",
                )
            # SSH failures carry the command's stdout/stderr tails: keep them for the operator.
            failed = outcome(StepStatus.FAILED, error=failure.message, output=failure_output(exc))
            raise _StepFailed(step.name, failure, failed) from exc
        self._observe_step(step.name, "done", started_at)
        ctx.results[step.name] = result
        ctx.log.debug("step done", extra={"step": step.name, "seconds": time.time() - started_at})
        return outcome(StepStatus.DONE, result=result)

    def _observe_step(self, name: str, outcome: str, started: float) -> None:
        if self._metrics is not None:
            self._metrics.step_finished(name, outcome, time.time() - started)

    async def _record_failure(
        self,
        job: JobRow,
        step: str,
        failure: _Failure,
        adapter: logging.LoggerAdapter[logging.Logger],
        fence: Fence | None = None,
        *,
        checkpoint: StepOutcome | None = None,
    ) -> JobOutcome:
        """Write the job's retry or failure, with the failed step's checkpoint in the same
        transaction: a kill between the two would leave a failed step under a running
        job, which the next start would run again (a non-idempotent step twice)."""
        attempts = job.attempts + 1
        message = f"{step}: {failure.message}"
        retry_at: float | None = None
        delay = 0.0
        if failure.rejected:
            outcome, status, event_status = (
                JobOutcome.REJECTED,
                JobStatus.FAILED,
                EventStatus.REJECTED,
            )
        elif failure.retriable and attempts < self._settings.max_attempts:
            delay = self.backoff(attempts)
            retry_at = time.time() + delay
            outcome, status, event_status = JobOutcome.RETRY, JobStatus.RETRY, EventStatus.RETRY
        else:
            if failure.retriable:
                message = f"{message} (gave up after {attempts} attempts)"
            outcome, status, event_status = JobOutcome.FAILED, JobStatus.FAILED, EventStatus.FAILED
        await asyncio.shield(
            self._store.jobs.update(
                job.id,
                event_id=job.event_id,
                status=status,
                event_status=event_status,
                attempts=attempts,
                next_attempt_at=retry_at,
                error_class=failure.error_class,
                last_error=message,
                final_step=checkpoint,
                fence=fence,
            )
        )
        if outcome is JobOutcome.RETRY:
            adapter.warning(
                "job failed, will retry",
                extra={
                    "step": step,
                    "attempt": attempts,
                    "retry_in": round(delay, 3),
                    "error": message,
                },
            )
        elif outcome is JobOutcome.REJECTED:
            adapter.error("event rejected", extra={"step": step, "error": message})
        else:
            adapter.error("job failed", extra={"step": step, "attempt": attempts, "error": message})
        return outcome
