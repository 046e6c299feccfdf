"""Plans and steps: what a handler returns and the runner executes.

A handler's ``plan(notification)`` is a pure function: it names the steps and
their order and does no I/O (no Tacker, no OpenStack, no SSH). Whatever a plan
needs to learn from the outside world is learned by a *step* (checkpointed,
under a timeout), and later steps read it from ``ctx.results``.

Where the number of steps depends on what such a step learned (one
``join-master-<node>`` per extra master), the plan holds a :class:`StepsFor`:
the runner expands it from the *checkpointed* result of the step it names, so a
plan built again on resume expands to exactly the steps its checkpoints were
written for.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from subscriber.kernel.context import JobContext

__all__ = [
    "Plan",
    "PlanItem",
    "RetryClass",
    "Step",
    "StepFunc",
    "StepsFor",
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


StepFunc = Callable[["JobContext"], Awaitable[Any]]


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

    def __post_init__(self) -> None:
        if not self.name or self.timeout <= 0:
            raise ValueError(f"a step needs a name and a positive timeout: {self.name!r}")


@dataclass(frozen=True, slots=True)
class StepsFor:
    """Steps made from the checkpointed result of an earlier step.

    Arguments:
        pattern: how the steps are named, for listings (``join-master-<node>``).
        after: the earlier step of the same plan whose result they are made from.
        expand: ``expand(result) -> steps``; pure (no I/O), called by the runner
            once ``after`` is done, with its stored result.
    """

    pattern: str
    after: str
    expand: Callable[[Any], Sequence[Step]]

    @property
    def name(self) -> str:
        return self.pattern


PlanItem = Step | StepsFor


@dataclass(frozen=True, slots=True)
class Plan:
    """The steps a handler chose, in order (see the module docstring)."""

    items: Sequence[PlanItem] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        names = [i.name for i in self.items]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"duplicate step names in plan: {sorted(dupes)}")
        seen: set[str] = set()
        for item in self.items:
            if isinstance(item, StepsFor) and item.after not in seen:
                raise ValueError(f"{item.pattern!r} expands after {item.after!r}, not before it")
            if isinstance(item, Step):
                seen.add(item.name)

    def outline(self) -> list[str]:
        """Step names in order, with the patterns of steps not expanded yet."""
        return [i.name for i in self.items]

    def steps(self, results: Mapping[str, Any]) -> Iterator[Step]:
        """The steps in order, each :class:`StepsFor` expanded when the iteration reaches it.

        Lazy on purpose: the runner adds each step's result to ``results`` as
        the step finishes (or from its checkpoint), and an expansion reads the
        result of its ``after`` step at that moment.

        Raises:
            KeyError: a ``StepsFor`` is reached before its ``after`` step has a result.
            ValueError: an expansion names a step the plan already has.
        """
        names: set[str] = set()
        for item in self.items:
            expanded = [item] if isinstance(item, Step) else item.expand(results[item.after])
            for step in expanded:
                if step.name in names:
                    raise ValueError(f"duplicate step name {step.name!r} in the plan")
                names.add(step.name)
                yield step

    def __len__(self) -> int:
        return len(self.items)
