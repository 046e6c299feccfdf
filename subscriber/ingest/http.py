"""The SOL003 callback endpoint: parse, hand over durably, acknowledge. Nothing else.

* ``GET``  -> 204 (Tacker's test notification at subscribe time; 20 s timeout).
* ``POST`` -> 204 only after the notification is durable where it goes (the
  store's commit; the Kafka broker's acknowledgement for the relay), duplicates
  too; 400 for bad JSON or schema (ProblemDetails names the first bad field);
  415 for a non-JSON content type; 413 past the size cap, without reading the
  rest; 503 when it cannot be made durable (Tacker v2 does not resend, so the
  reconciler is the safety net).

A POST without ``Content-Type`` is read as JSON: Tacker's v1 conductor posts its
notifications with ``requests`` and ``data=json.dumps(...)``, which sets no
``Content-Type`` (and no ``Version``), and retries anything but 204 three times,
10 s apart, while the operation waits.
"""

from __future__ import annotations

import json
import logging
import os
import re
import ssl
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import Counter

from schemas import NotificationParseError, parse_notification
from schemas.openapi import OPENAPI_PATH, openapi_document
from subscriber import tracing
from subscriber.config import HttpSettings
from subscriber.errors import LccnError, ListenFailed
from subscriber.ingest.problems import Guard, problem_middleware_with, problem_response
from subscriber.ingest.traced import ingest_attributes, note_appended
from subscriber.lifecycle import Component
from subscriber.store import NewEvent

__all__ = [
    "GUARDS_KEY",
    "CallbackIngress",
    "EventSink",
    "Guard",
    "add_guard",
    "make_app",
    "response_counter",
]

log = logging.getLogger(__name__)

_JSON_TYPES = frozenset({"application/json"})
# The ``Version`` header is stored (events.api_version, 32 characters): "2.0.0", "1.3.0".
_VERSION = re.compile(r"[0-9A-Za-z.+-]{1,32}")


class EventSink(Protocol):
    """Where the callback hands each notification: the store (``serve``), or the Kafka
    topic (``serve --role relay``). ``append`` returns once it is durable there and raises
    an :class:`~subscriber.errors.LccnError` when it cannot be (``retriable`` when worth
    a retry soon: the store or the broker unreachable)."""

    async def append(self, new: NewEvent) -> Any: ...


EVENT_SINK_KEY = web.AppKey("event_sink", EventSink)
SETTINGS_KEY = web.AppKey("http_settings", HttpSettings)


async def _read_capped(request: web.Request, cap: int) -> bytes | None:
    """The body, or ``None`` as soon as it grows past ``cap`` bytes."""
    length = request.content_length
    if length is not None:
        if length > cap:
            return None
        # A declared length within the cap (Tacker's case): aiohttp reads exactly that
        # much, in one call rather than one loop turn per chunk.
        return await request.read()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(65536):
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _test_notification(request: web.Request) -> web.Response:
    return web.Response(status=204)


async def _notification(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS_KEY]
    sink = request.app[EVENT_SINK_KEY]
    # aiohttp reports a missing Content-Type as application/octet-stream: ask the header.
    if "Content-Type" in request.headers and request.content_type not in _JSON_TYPES:
        return problem_response(
            415,
            f"Content-Type must be application/json, not {request.content_type or 'missing'}",
            instance=request.path,
        )
    body = await _read_capped(request, settings.max_body_bytes)
    if body is None:
        return problem_response(
            413,
            f"body exceeds the limit of {settings.max_body_bytes} bytes",
            instance=request.path,
            headers={"Connection": "close"},
        )
    version = request.headers.get("Version")
    if version is not None and not _VERSION.fullmatch(version):
        return problem_response(
            400,
            "the Version header must be a version like 2.0.0 (at most 32 characters)",
            instance=request.path,
        )
    try:
        notification = parse_notification(body)
    except NotificationParseError as exc:
        return problem_response(400, exc.detail, instance=request.path, field=exc.field)
    with tracing.span("ingest", ingest_attributes("http", notification)) as span:
        new = NewEvent(
            source="http",
            notification=notification,
            raw=body,
            api_version=version,
            traceparent=span.traceparent,
        )
        try:
            result = await sink.append(new)
        except LccnError as exc:
            span.set("lccn.stored", False)
            headers = {"Retry-After": "1"} if exc.retriable else None
            return problem_response(503, exc.message, instance=request.path, headers=headers)
        note_appended(span, result)
    return web.Response(status=204)


_PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
_CALLBACK_CODES = (204, 400, 401, 413, 415, 500, 503)
GUARDS_KEY = web.AppKey("guards", list[Guard])


def add_guard(app: web.Application, guard: Guard) -> None:
    """Have ``guard`` look at every request of ``app`` (made by :func:`make_app`) before its
    handler, after the guards added before it; the first answer that refuses it is the
    answer. Authentication is one."""
    app[GUARDS_KEY].append(guard)


def response_counter(
    counter: Counter, callback_path: str, hook_path: str | None = None
) -> Callable[[str, int], None]:
    """``count(path, status)``, counting an answer in ``counter`` (``lccn_http_responses``)
    by endpoint and status code. The endpoint is one of a few names, never the path a
    client chose: ``callback``, ``hooks``, ``probes``, ``other``."""

    # The answers alerts rate from their first occurrence: a series born at 1 shows
    # no increase to rate() (Prometheus never saw it at 0).
    for code in _CALLBACK_CODES:
        counter.labels("callback", str(code))

    def endpoint(path: str) -> str:
        if path == callback_path:
            return "callback"
        if hook_path is not None and (path == hook_path or path.startswith(hook_path + "/")):
            return "hooks"
        return "probes" if path in _PROBES else "other"

    # Each series' child once: prometheus_client's labels() costs several times its inc().
    children: dict[tuple[str, int], Any] = {}

    def count(path: str, status: int) -> None:
        key = (endpoint(path), status)
        child = children.get(key)
        if child is None:
            child = children[key] = counter.labels(key[0], str(status))
        child.inc()

    return count


def make_app(
    settings: HttpSettings,
    sink: EventSink,
    *,
    hook_path: str | None = None,
    responses: Counter | None = None,
) -> web.Application:
    """The aiohttp application with the callback route (other routes may be added);
    ``sink``: where notifications go; ``hook_path``: the drain hook's, when it is on (for
    the OpenAPI document); ``responses``: counts every answer (``lccn_http_responses``).
    Requests pass the guards :func:`add_guard` adds before their handler."""
    guards: list[Guard] = []
    count = response_counter(responses, settings.path, hook_path) if responses is not None else None
    # The body cap is enforced by _read_capped; aiohttp's own cap must not cut in first.
    app = web.Application(
        middlewares=[problem_middleware_with(guards, count)],
        client_max_size=settings.max_body_bytes + 1,
    )
    app[GUARDS_KEY] = guards
    app[EVENT_SINK_KEY] = sink
    app[SETTINGS_KEY] = settings
    app.router.add_route("GET", settings.path, _test_notification)
    app.router.add_route("POST", settings.path, _notification)
    document = json.dumps(openapi_document(settings.path, hook_path)).encode()

    async def openapi(request: web.Request) -> web.Response:
        return web.Response(body=document, content_type="application/json")

    app.router.add_route("GET", OPENAPI_PATH, openapi)
    return app


class CallbackIngress(Component):
    """Serves the app on ``settings.host:settings.port`` (TLS when given ``ssl_context``).

    With ``probes=True`` it is the probes' own listener instead (plain HTTP on
    ``settings.probes_listener()``: ``/healthz``, ``/readyz``, ``/metrics``).
    ``stop()`` stops accepting; in-flight requests finish.
    """

    def __init__(
        self,
        settings: HttpSettings,
        app: web.Application,
        *,
        ssl_context: ssl.SSLContext | None = None,
        probes: bool = False,
    ) -> None:
        super().__init__()
        self._settings = settings
        self._ssl = ssl_context
        self._probes = probes
        listener = settings.probes_listener() if probes else (settings.host, settings.port)
        if listener is None:
            raise ValueError("no probes listener: the callback listener serves the probes")
        self._host, self._port = listener
        self.app = app
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            self._host,
            self._port,
            backlog=1024,
            reuse_address=True,
            ssl_context=self._ssl,
        )
        try:
            await site.start()
        except OSError as exc:
            reason = (os.strerror(exc.errno) if exc.errno else str(exc)).lower()
            names = (
                "http.metrics_host or http.metrics_port"
                if self._probes
                else ("http.host, http.port or --port")
            )
            raise ListenFailed(
                f"cannot listen on {self._host}:{self._port}: {reason} ({names})"
            ) from exc
        server: Any = site._server
        sockets = server.sockets if server is not None else []
        self.port = int(sockets[0].getsockname()[1]) if sockets else self._port
        scheme = "https" if self._ssl else "http"
        path = "/metrics" if self._probes else self._settings.path
        log.info(
            "metrics listening" if self._probes else "listening",
            extra={"url": f"{scheme}://{self._host}:{self.port}{path}"},
        )

    async def _stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
