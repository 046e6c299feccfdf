"""What a handler is: a function of an event that returns a plan of named steps.

A step has a name (unique in its plan), says whether it is idempotent, has a
timeout and a retry class. The runner checkpoints each step in the store and,
on retry, restart or replay, resumes at the first step not done.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from schemas import Notification

__all__ = [
    "Handler",
    "JobContext",
    "Plan",
    "RetryClass",
    "SkipStep",
    "Step",
]


class RetryClass(enum.Enum):
    """How a step's unclassified errors are treated.

    ``AUTO``: :class:`~subscriber.errors.LccnError` subclasses decide by their
    ``retriable`` attribute; ``OSError`` and timeouts are transient; anything
    else is permanent. ``NEVER``: every failure is permanent. ``ALWAYS``: every
    failure is transient (still bounded by the job's attempts).
    """

    AUTO = "auto"
    NEVER = "never"
    ALWAYS = "always"


class SkipStep(Exception):
    """Raised by a step whose work is already done ("node already joined")."""

    def __init__(self, reason: str = "", result: Any = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.result = result


@dataclass(slots=True)
class JobContext:
    """What a step sees of its job.

    Attributes:
        event_id, job_id, attempt: identity of the run (attempt counts from 1).
        mode: ``live``, ``resume`` or ``anew``.
        notification: the event's notification, parsed from the stored
            (redacted) body: secrets must be read from Tacker, not from here.
        results: results of this job's steps that are already done, by name;
            a step's return value is added under its name when it finishes.
        services: the clients steps use (ssh, tacker, openstack ...), by name.
        log: a logger adapter carrying the event/job/instance ids.
    """

    event_id: int
    job_id: int
    attempt: int
    mode: str
    notification: Notification
    results: dict[str, Any]
    services: Mapping[str, Any]
    log: logging.LoggerAdapter[logging.Logger]

    @property
    def vnf_instance_id(self) -> str:
        return self.notification.vnfInstanceId


StepFunc = Callable[[JobContext], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Step:
    """One named unit of a job.

    Arguments:
        name: unique within the plan; the checkpoint key.
        run: ``async def run(ctx) -> result``; the result (JSON-able, no
            secrets) is stored and given to later steps via ``ctx.results``.
        idempotent: safe to run again. A non-idempotent step that was cut off
            mid-run (crash, timeout) is never re-run: its job fails and waits
            for an operator.
        timeout: seconds before the step is cancelled.
        retry: how unclassified errors are treated.
    """

    name: str
    run: StepFunc
    idempotent: bool = True
    timeout: float = 300.0
    retry: RetryClass = RetryClass.AUTO


@dataclass(frozen=True, slots=True)
class Plan:
    """The steps a handler chose, in order."""

    steps: Sequence[Step] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        names = [s.name for s in self.steps]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"duplicate step names in plan: {sorted(dupes)}")

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)


class Handler(Protocol):
    """Turns one event into a plan."""

    name: str

    async def plan(self, ctx: JobContext) -> Plan: ...
