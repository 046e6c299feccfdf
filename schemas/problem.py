"""SOL013 ProblemDetails (RFC 7807), the error body of every 4xx/5xx we send."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["PROBLEM_CONTENT_TYPE", "ProblemDetails"]

PROBLEM_CONTENT_TYPE = "application/problem+json"


class ProblemDetails(BaseModel):
    """``status`` and ``detail`` are required by SOL013; unknown members are kept."""

    model_config = ConfigDict(extra="allow")

    type: str | None = None
    title: str | None = None
    status: int
    detail: str
    instance: str | None = None
