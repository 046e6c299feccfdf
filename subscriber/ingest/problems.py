"""SOL013 ProblemDetails responses for aiohttp."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

from schemas import PROBLEM_CONTENT_TYPE, ProblemDetails
from subscriber.redact import redact_text

log = logging.getLogger(__name__)

__all__ = [
    "Guard",
    "error_response",
    "problem_middleware",
    "problem_middleware_with",
    "problem_response",
]

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def problem_response(
    status: int,
    detail: str,
    *,
    instance: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: object,
) -> web.Response:
    extra = {k: v for k, v in extra.items() if v is not None}
    problem = ProblemDetails(
        status=status, title=_TITLES.get(status), detail=detail, instance=instance, **extra
    )
    return web.Response(
        status=status,
        body=problem.model_dump_json(exclude_none=True).encode(),
        content_type=PROBLEM_CONTENT_TYPE,
        headers=headers,
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Guard = Callable[[web.Request], Awaitable[web.StreamResponse | None]]
"""Looks at a request before its handler: the answer that refuses it, or ``None``."""


def error_response(request: web.Request, exc: Exception) -> web.Response:
    """ProblemDetails for what a handler raised: aiohttp's own HTTP errors (404, 405,
    413 ...: status 400 and up) as they are; any other exception a 500, logged once with a
    request id the answer names (neither the log nor the answer echoes the body)."""
    if isinstance(exc, web.HTTPException):
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
        detail = exc.text if exc.text and not exc.text.startswith(str(exc.status)) else exc.reason
        return problem_response(exc.status, detail, instance=request.path, headers=headers)
    request_id = uuid.uuid4().hex[:16]
    log.error(
        "request failed",
        extra={
            "request_id": request_id,
            "method": request.method,
            "path": request.path,
            "error": redact_text(f"{type(exc).__name__}: {exc}")[:500],
        },
        exc_info=log.isEnabledFor(logging.DEBUG),
    )
    return problem_response(
        500,
        f"internal error; request id {request_id} in the service's log",
        instance=request.path,
        headers={"X-Request-Id": request_id},
    )


def problem_middleware_with(
    guards: Sequence[Guard] = (), count: Callable[[str, int], None] | None = None
) -> Middleware:
    """A middleware that asks ``guards`` in turn before the handler (the first answer that
    refuses a request is its answer), renders every error as ProblemDetails
    (:func:`error_response`; redirects pass) and hands every answer's path and status
    to ``count``. One layer for all three: each layer is a coroutine frame on every
    request's path."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = None
            for guard in guards:
                response = await guard(request)
                if response is not None:
                    break
            if response is None:
                response = await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:  # a redirect: aiohttp sends it
                if count is not None:
                    count(request.path, exc.status)
                raise
            response = error_response(request, exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            response = error_response(request, exc)
        if count is not None:
            count(request.path, response.status)
        return response

    return middleware


problem_middleware = problem_middleware_with()
"""Every error as ProblemDetails (the probes' listeners)."""
