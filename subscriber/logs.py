"""Logging: one JSON object per line (or text), keyed by event/job/instance ids.

Every message and field goes through redaction: no secret reaches a log line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import MutableMapping
from typing import Any

from subscriber.redact import redact, redact_text

__all__ = ["EventLogAdapter", "JsonFormatter", "TextFormatter", "setup_logging"]

# LogRecord attributes that are not user fields.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys() | {"message", "asctime", "taskName"}
)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


class EventLogAdapter(logging.LoggerAdapter[logging.Logger]):
    """Adds the job's ids to every record; call-site ``extra`` is merged, not replaced."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact_text(record.getMessage()),
        }
        for key, value in _fields(record).items():
            out[key] = redact(value) if not isinstance(value, str) else redact_text(value)
        if record.exc_info:
            out["exc"] = redact_text(self.formatException(record.exc_info))
        return json.dumps(out, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = redact_text(super().format(record))
        fields = _fields(record)
        if fields:
            text += " " + " ".join(
                f"{k}={json.dumps(redact(v), default=str)}" for k, v in fields.items()
            )
        return text


class _RoleFilter(logging.Filter):
    """Marks every record with the process's ``serve`` role (ingest or worker share a stream)."""

    def __init__(self, role: str) -> None:
        super().__init__()
        self._role = role

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "role"):
            record.role = self._role
        return True


def setup_logging(fmt: str = "json", level: str = "INFO", *, role: str | None = None) -> None:
    """Route the root logger to stderr in the chosen format (idempotent).

    Arguments:
        role: added to every record as ``role`` (``serve``'s processes share stderr).
    """
    handler = logging.StreamHandler(sys.stderr)
    if role is not None:
        handler.addFilter(_RoleFilter(role))
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("aiohttp.access", "sqlalchemy", "aiosqlite", "asyncio", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
