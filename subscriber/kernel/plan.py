"""Plans and steps: what a handler returns and the runner executes.

A handler's ``plan(notification)`` is a pure function: it names the steps and
their order and does no I/O (no Tacker, no OpenStack, no SSH). Whatever a plan
needs to learn from the outside world is learned by a *step* (checkpointed,
under a timeout) and returned as a typed result
(:class:`~subscriber.kernel.results.StepResult`); a later step declares it in
its ``needs`` and reads it with ``ctx.result(Kind)``. A plan whose step needs a
result that no earlier step makes is refused when it is built.

Where the number of steps depends on what such a step learned (one
``join-master-<node>`` per extra master), the plan holds a :class:`StepsFor`:
the runner expands it from the *checkpointed* result it names, so a plan built
again on resume expands to exactly the steps its checkpoints were written for.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from subscriber.kernel.results import StepResult

if TYPE_CHECKING:
    from subscriber.kernel.context import JobContext

__all__ = [
    "Kinds",
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
Kinds = tuple[type[StepResult], ...]


@dataclass(frozen=True, slots=True)
class Step:
    """One named unit of a job.

    Arguments:
        name: unique within the plan; the checkpoint key.
        run: ``async def run(ctx) -> result``; the result (a
            :class:`~subscriber.kernel.results.StepResult`, no secrets) is
            stored, and read by later steps that need it.
        idempotent: safe to run again. A non-idempotent step that was cut off
            mid-run (crash, timeout) is never re-run: its job fails and waits
            for an operator.
        timeout: seconds before the step is cancelled.
        retry: how unclassified errors are treated.
        needs: the results this step reads; an earlier step of the plan must make
            each (the plan refuses otherwise).
        wants: results it reads when an earlier step made them (``None`` else).
        makes: the result kind it returns, when later steps may read it; its name
            is then the kind's ``step``.
    """

    name: str
    run: StepFunc
    idempotent: bool = True
    timeout: float = 300.0
    retry: RetryClass = RetryClass.AUTO
    needs: Kinds = ()
    wants: Kinds = ()
    makes: type[StepResult] | None = None

    def __post_init__(self) -> None:
        if not self.name or self.timeout <= 0:
            raise ValueError(f"a step needs a name and a positive timeout: {self.name!r}")
        if self.makes is not None and self.makes.step not in ("", self.name):
            raise ValueError(
                f"step {self.name!r} makes {self.makes.__name__}, "
                f"which is the result of step {self.makes.step!r}"
            )
        for kind in (*self.needs, *self.wants):
            if not kind.step:
                raise ValueError(
                    f"step {self.name!r} reads {kind.__name__}, which names no step that makes it"
                )

    @property
    def reads(self) -> frozenset[type[StepResult]]:
        """Every result kind this step may read."""
        return frozenset((*self.needs, *self.wants))


@dataclass(frozen=True, slots=True)
class StepsFor:
    """Steps made from the checkpointed result of an earlier step.

    Arguments:
        pattern: how the steps are named, for listings (``join-master-<node>``).
        after: the result kind they are made from; an earlier step makes it.
        expand: ``expand(result) -> steps``; pure (no I/O), called by the runner
            once that result is there, with it.
    """

    pattern: str
    after: type[StepResult]
    expand: Callable[[Any], Sequence[Step]]

    @property
    def name(self) -> str:
        return self.pattern

    @property
    def needs(self) -> Kinds:
        return (self.after,)


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
        made: set[str] = set()
        for item in self.items:
            for kind in item.needs:
                if kind.step not in made:
                    raise ValueError(
                        f"step {item.name!r} needs {kind.__name__}, the result of step "
                        f"{kind.step!r}, which no earlier step of the plan makes"
                    )
            if isinstance(item, Step):
                made.add(item.name)

    def outline(self) -> list[str]:
        """Step names in order, with the patterns of steps not expanded yet."""
        return [i.name for i in self.items]

    def steps(self, results: Mapping[str, Any]) -> Iterator[Step]:
        """The steps in order, each :class:`StepsFor` expanded when the iteration reaches it.

        Lazy on purpose: the runner adds each step's stored result to ``results``
        as the step finishes (or from its checkpoint), and an expansion reads the
        result it is made from at that moment.

        Raises:
            KeyError: a ``StepsFor`` is reached before its result is there.
            ValueError: an expansion names a step the plan already has.
        """
        names: set[str] = set()
        for item in self.items:
            if isinstance(item, Step):
                expanded: Sequence[Step] = [item]
            else:
                expanded = item.expand(item.after.from_json(results[item.after.step]))
            for step in expanded:
                if step.name in names:
                    raise ValueError(f"duplicate step name {step.name!r} in the plan")
                names.add(step.name)
                yield step

    def __len__(self) -> int:
        return len(self.items)
