"""Failed events: what an operator sees of jobs that ended failed.

Nothing is copied anywhere: a failed event keeps its (redacted) body, every
job that ran for it (attempts, error class, last error) and each step's
checkpoint, with the stdout/stderr tails of a failed SSH command in the step's
``output``. This module decides what a failed step keeps (:func:`failure_output`)
and reads the operator's time filters; the query itself is the store's
(:class:`~subscriber.store.FailedStore`, ``store.failed``), shared by
``failed list`` and ``replay``.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

from subscriber.redact import redact_text

__all__ = [
    "OUTPUT_TAIL_CHARS",
    "failure_output",
    "parse_time",
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
