"""Optional OpenTelemetry tracing: one trace per event, ingest -> job -> steps -> calls.

Nothing of ``opentelemetry`` is imported unless :func:`configure` turns tracing on
(``tracing.enabled`` with the ``otel`` extra installed) or a test hands in its own
provider (:func:`use_provider`). Until then every helper returns one shared no-op
object, so the code paths that open spans cost a function call and a ``with``.

The trace context crosses ``serve``'s ingest/worker boundary through the store: the
ingest span's W3C ``traceparent`` is stored with the event, and the job's span
continues it (:func:`span` with ``parent``).

Attributes carry names only, never arguments or bodies: an SSH span names its host
and the command's program (:func:`command_name`), a Tacker span its method, path
template (:func:`path_template`) and status.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from subscriber.errors import ConfigError, SkipStep

if TYPE_CHECKING:
    from subscriber.config import TracingSettings

__all__ = [
    "NOOP",
    "Span",
    "check",
    "command_name",
    "configure",
    "current_trace_id",
    "enabled",
    "path_template",
    "shutdown",
    "span",
    "start",
    "trace_id_of",
    "use_provider",
]

log = logging.getLogger(__name__)

Attributes = Mapping[str, str | int | float | bool]


class Span:
    """A span as the service sees it; this base class is the no-op one (tracing off)."""

    __slots__ = ()

    @property
    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` of this span (``None``: tracing off)."""
        return None

    @property
    def trace_id(self) -> str | None:
        """The trace id, 32 hex digits (``None``: tracing off)."""
        return None

    def set(self, key: str, value: str | int | float | bool | None) -> None:
        """Set one attribute (``None`` is dropped)."""

    def end(self, error: BaseException | None = None) -> None:
        """End a span from :func:`start`; ``error`` marks it failed (by class name only)."""

    def __enter__(self) -> Span:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        return None


#: The one no-op span every helper returns while tracing is off.
NOOP = Span()

# Exceptions that end a span normally: step outcomes, not failures.
_BENIGN = (SkipStep,)


class _Live(Span):
    """An OpenTelemetry span; as a context manager it is the current span inside."""

    __slots__ = ("_otel", "_span", "_token")

    def __init__(self, otel: _Otel, span: Any) -> None:
        self._otel = otel
        self._span = span
        self._token: Any = None

    @property
    def traceparent(self) -> str | None:
        ctx = self._span.get_span_context()
        return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"

    @property
    def trace_id(self) -> str | None:
        return f"{self._span.get_span_context().trace_id:032x}"

    def set(self, key: str, value: str | int | float | bool | None) -> None:
        if value is not None:
            self._span.set_attribute(key, value)

    def end(self, error: BaseException | None = None) -> None:
        if error is not None and not isinstance(error, _BENIGN):
            # The class only: an exception's text may quote a command line.
            name = type(error).__name__
            self._span.set_attribute("error.type", name)
            self._span.set_status(self._otel.error_status(name))
        self._span.end()

    def __enter__(self) -> Span:
        self._token = self._otel.attach(self._span)
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        try:
            self.end(exc)
        finally:
            self._otel.detach(self._token)


class _Otel:
    """What tracing needs of OpenTelemetry, imported once tracing is on."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = provider
        self._context = context
        self._trace = trace
        self._status = Status
        self._code = StatusCode
        self._propagator = TraceContextTextMapPropagator()
        self.tracer = provider.get_tracer("lccn-subscriber")

    def error_status(self, description: str) -> Any:
        return self._status(self._code.ERROR, description)

    def attach(self, span: Any) -> Any:
        return self._context.attach(self._trace.set_span_in_context(span))

    def detach(self, token: Any) -> None:
        self._context.detach(token)

    def start(self, name: str, attributes: Attributes | None, parent: str | None) -> _Live:
        ctx = None
        if parent:
            ctx = self._propagator.extract({"traceparent": parent})
        span = self.tracer.start_span(name, context=ctx, attributes=attributes)
        return _Live(self, span)

    def current_trace_id(self) -> str | None:
        ctx = self._trace.get_current_span().get_span_context()
        return f"{ctx.trace_id:032x}" if ctx.is_valid else None


_otel: _Otel | None = None


def enabled() -> bool:
    """Whether spans are recorded in this process."""
    return _otel is not None


def check(settings: TracingSettings) -> bool:
    """Whether ``settings`` turn tracing on, checked without importing OpenTelemetry
    (``serve`` asks before it forks its worker; the exporter's thread starts after).

    Raises:
        ConfigError: tracing is enabled but the ``otel`` extra is not installed.
    """
    if not settings.enabled:
        return False
    wanted = ["opentelemetry.sdk.trace"]
    if settings.exporter == "otlp":
        wanted.append("opentelemetry.exporter.otlp.proto.http")
    for name in wanted:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise ConfigError(
                f"tracing.enabled needs the otel extra ({name} is missing): "
                "pip install 'lccn-subscriber[otel]'"
            )
    return True


def configure(settings: TracingSettings, *, role: str | None = None) -> bool:
    """Turn tracing on as ``settings`` say; returns whether it is on.

    Arguments:
        settings: the ``tracing`` section.
        role: ``serve``'s role of this process, added to the resource.

    Raises:
        ConfigError: tracing is enabled but the ``otel`` extra is not installed.
    """
    global _otel
    if not check(settings):
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attrs: dict[str, str] = {"service.name": settings.service_name}
    if role is not None:
        attrs["lccn.role"] = role
    provider = TracerProvider(resource=Resource.create(attrs))
    if settings.exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = settings.endpoint or None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    _otel = _Otel(provider)
    log.info(
        "tracing on", extra={"exporter": settings.exporter, "endpoint": settings.endpoint or None}
    )
    return True


def use_provider(provider: Any | None) -> None:
    """Record spans with ``provider`` (a ``TracerProvider``; tests pass one with an
    in-memory exporter), or turn tracing off again with ``None``."""
    global _otel
    _otel = _Otel(provider) if provider is not None else None


def shutdown() -> None:
    """Flush and stop the exporter (at the end of ``serve``); tracing is off after."""
    global _otel
    otel, _otel = _otel, None
    if otel is not None and hasattr(otel.provider, "shutdown"):
        otel.provider.shutdown()


def span(name: str, attributes: Attributes | None = None, *, parent: str | None = None) -> Span:
    """A span to use with ``with``: current inside it, ended (failed on an exception) after.

    Arguments:
        parent: a stored ``traceparent`` to continue; ``None``: the current span's child
            (or a new trace).
    """
    if _otel is None:
        return NOOP
    return _otel.start(name, attributes, parent)


def start(name: str, attributes: Attributes | None = None, *, parent: str | None = None) -> Span:
    """A span that is not made current; the caller ends it with ``.end()``."""
    if _otel is None:
        return NOOP
    return _otel.start(name, attributes, parent)


def current_trace_id() -> str | None:
    """The trace id of the current span, if tracing is on and a span is current."""
    return _otel.current_trace_id() if _otel is not None else None


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id a stored ``traceparent`` names (``None`` if none or malformed)."""
    if not traceparent:
        return None
    found = _TRACEPARENT.fullmatch(traceparent)
    return found.group(1) if found else None


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_PROGRAM = re.compile(r"[A-Za-z0-9._+-]{1,64}")
_DURATION = re.compile(r"\d+(\.\d+)?[smhd]?")  # timeout's first argument
_WRAPPERS = frozenset({"sudo", "env", "nohup", "timeout", "exec", "command"})


def command_name(command: str) -> str:
    """The program a shell command line runs (``kubeadm`` of ``kubeadm join --token ...``),
    never an argument: leading ``VAR=value`` assignments and wrappers (``sudo``, ``env``)
    are skipped; what cannot be named safely is ``sh``."""
    try:
        words = shlex.split(command)
    except ValueError:
        return "sh"
    for word in words:
        if (
            _ASSIGNMENT.match(word)
            or word in _WRAPPERS
            or word.startswith("-")
            or _DURATION.fullmatch(word)
        ):
            continue
        program = word.rsplit("/", 1)[-1]
        return program if _PROGRAM.fullmatch(program) else "sh"
    return "sh"


_WORD = re.compile(r"[a-z][a-z_]*|v\d+(\.\d+)?")


def path_template(path: str) -> str:
    """``/vnflcm/v2/vnf_instances/{id}`` of ``/vnflcm/v2/vnf_instances/3f1c...``: resource
    words stay, every other segment (ids, file names) becomes ``{id}``."""
    path = path.split("?", 1)[0]
    parts = [p if not p or _WORD.fullmatch(p) else "{id}" for p in path.split("/")]
    return "/".join(parts)
