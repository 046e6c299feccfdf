"""Typed step results: what a step returns, what is checkpointed, what later steps read.

A step returns a :class:`StepResult` (a small frozen pydantic model). The runner
stores it as JSON (camelCase keys, as operators read them in ``events show``)
and hands it to later steps, which read it through
:meth:`~subscriber.kernel.context.JobContext.result` with the result's class,
never by a string key. A result that later steps read names the step that makes
it (``class Discovered(StepResult, step="discover")``); a step declares the
results it reads in its ``needs`` (see :class:`~subscriber.kernel.plan.Step`),
and a plan whose step needs a result no earlier step makes cannot be built.

Nothing secret goes into a result: it is stored, shown and logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["StepResult", "result_json"]


class StepResult(BaseModel):
    """Base of every step result.

    Subclasses that later steps read pass ``step=`` (the name of the step that makes
    them, also their key in the job's checkpoints)::

        class Discovered(StepResult, step="discover"):
            endpoint: str

    Fields are snake_case in Python and camelCase in JSON. Unknown keys are ignored on
    load, so a checkpoint written by an older version still resumes.
    """

    model_config = ConfigDict(
        frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True
    )

    step: ClassVar[str] = ""  # the step that makes it, for a result later steps read

    def __init_subclass__(cls, step: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if step:
            cls.step = step

    def as_json(self) -> dict[str, Any]:
        """The stored form: JSON-able, camelCase keys."""
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Self:
        """The inverse of :meth:`as_json` (a checkpoint read back)."""
        return cls.model_validate(data or {})


def result_json(result: Any) -> Any:
    """What the runner stores for a step's return value: a :class:`StepResult` as JSON,
    anything else (a handler module's plain dict, ``None``) as it is."""
    return result.as_json() if isinstance(result, StepResult) else result
