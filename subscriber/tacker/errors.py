"""The one place where the Tacker client's foreign errors become ours.

The classes live in :mod:`subscriber.errors`::

    StepError
    ├── TransientStepError
    │   └── TackerUnavailable     connection refused/reset, timeout, 5xx, Keystone down
    │       └── TackerConflict    409 past the client's own retries (instance lock,
    │                             an op-occ in FAILED_TEMP)
    └── PermanentStepError
        └── TackerRejected        4xx other than 409 (ProblemDetails ``detail`` in the text)
            ├── TackerAuthError   Keystone refused the credentials, or Tacker said 401/403
            └── TackerOpFailed    the MODIFY_INFO op-occ ended FAILED_TEMP/FAILED/ROLLED_BACK

Messages carry the method, the path and Tacker's ``detail`` (redacted), never a
request body, a token or a password.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

import aiohttp

from subscriber.errors import (
    TackerAuthError,
    TackerConflict,
    TackerRejected,
    TackerUnavailable,
)
from subscriber.redact import redact_text

__all__ = [
    "error_for_status",
    "keystone_errors",
    "problem_detail",
    "translate_errors",
]


def problem_detail(body: bytes) -> str:
    """Tacker's ProblemDetails ``detail`` (or ``title``), redacted; short text otherwise."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        return redact_text(body[:200].decode("utf-8", errors="replace").strip())
    if isinstance(data, dict):
        # v2: ProblemDetails; v1 / legacy: {"TackerError": {"message": ...}} or {"error": ...}
        for candidate in (data, *[v for v in data.values() if isinstance(v, dict)]):
            for key in ("detail", "message", "title"):
                value = candidate.get(key)
                if isinstance(value, str) and value:
                    return redact_text(value)
    return redact_text(str(data)[:200])


def error_for_status(
    method: str, path: str, status: int, body: bytes
) -> TackerUnavailable | TackerRejected:
    """The error for a non-2xx answer (the caller decides whether to retry first)."""
    text = f"Tacker {method} {path}: {status} {problem_detail(body)}".rstrip()
    if status == 409:
        return TackerConflict(text, status=status)
    if status >= 500 or status == 429:
        return TackerUnavailable(text, status=status)
    if status in (401, 403):
        return TackerAuthError(text, status=status)
    return TackerRejected(text, status=status)


@contextlib.contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Turn aiohttp errors and timeouts raised inside into Tacker errors (``from exc``)."""
    try:
        yield
    except (TackerUnavailable, TackerRejected):
        raise
    except TimeoutError as exc:
        raise TackerUnavailable(f"{what}: timed out") from exc
    except aiohttp.ClientConnectorError as exc:
        reason = (os.strerror(exc.os_error.errno) if exc.os_error.errno else str(exc)).lower()
        raise TackerUnavailable(
            f"{what}: cannot connect to {exc.host}:{exc.port}: {reason}"
        ) from exc
    except aiohttp.ClientError as exc:
        raise TackerUnavailable(f"{what}: {type(exc).__name__}") from exc


@contextlib.contextmanager
def keystone_errors(what: str) -> Iterator[None]:
    """:func:`translate_errors`, and keystoneauth1's errors too (``from exc``).

    Only :class:`~subscriber.tacker.auth.KeystoneAuth` calls into keystoneauth1, and
    it has imported it by then: importing it here keeps it (~7 MB with ``requests``)
    out of a process that never authenticates to Keystone.
    """
    from keystoneauth1 import exceptions as ks_exc

    with translate_errors(what):
        try:
            yield
        except ks_exc.Unauthorized as exc:
            raise TackerAuthError(
                f"{what}: Keystone refused the credentials (401); check tacker.username/"
                "password or the application credential",
                status=401,
            ) from exc
        except ks_exc.Forbidden as exc:
            raise TackerAuthError(
                f"{what}: Keystone forbade the request (403)", status=403
            ) from exc
        except ks_exc.EndpointNotFound as exc:
            raise TackerRejected(
                f"{what}: no Tacker endpoint in the Keystone catalog ({redact_text(str(exc))})"
            ) from exc
        except (ks_exc.ConnectFailure, ks_exc.ConnectionError, ks_exc.RequestTimeout) as exc:
            raise TackerUnavailable(f"{what}: Keystone unreachable ({type(exc).__name__})") from exc
        except ks_exc.HttpError as exc:
            status = getattr(exc, "http_status", None)
            cls = TackerUnavailable if (status or 500) >= 500 else TackerRejected
            raise cls(f"{what}: Keystone answered {status}", status=status) from exc
        except ks_exc.ClientException as exc:
            raise TackerRejected(f"{what}: Keystone: {redact_text(str(exc))}") from exc
