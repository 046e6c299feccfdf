"""Tracing across ``serve``'s processes: the ingest process stores the traceparent with
the event, the forked worker continues that trace, both export over OTLP/HTTP (to a
receiver in this test), and ``events show`` prints the trace id."""

from __future__ import annotations

import asyncio
import gzip
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.loopback import listen
from tests.programs import ServeProcess, cli


class _Receiver:
    """An OTLP/HTTP traces endpoint: every span received, with its process's role."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.received = asyncio.Event()
        self.app = web.Application()
        self.app.router.add_post("/v1/traces", self._traces)
        self.url = ""

    async def _traces(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        export = ExportTraceServiceRequest.FromString(raw)
        for resource_spans in export.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        {
                            "name": span.name,
                            "role": resource.get("lccn.role"),
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex() or None,
                            "attributes": {a.key: a.value for a in span.attributes},
                        }
                    )
        self.received.set()
        return web.Response(status=200, content_type="application/x-protobuf")


@pytest.fixture
async def receiver() -> AsyncIterator[_Receiver]:
    found = _Receiver()
    runner = web.AppRunner(found.app)
    found.url = await listen(runner)
    yield found
    await runner.cleanup()


async def test_the_worker_continues_the_trace_ingest_stored(
    tmp_path: Path, receiver: _Receiver
) -> None:
    env = {
        "LCCN_TRACING__ENABLED": "true",
        "LCCN_TRACING__ENDPOINT": f"{receiver.url}/v1/traces",
    }
    serve = ServeProcess(tmp_path, env=env).start()
    try:
        await serve.handle_one()
    finally:
        assert serve.proc is not None
        serve.proc.send_signal(signal.SIGTERM)
        # Off the event loop: both processes flush their spans to the receiver as they stop.
        code = await asyncio.to_thread(serve.proc.wait, 30)
    log = serve.log_text()
    assert code == 0, log[-4000:]
    assert "tracing on" in log

    (ingest,) = [s for s in receiver.spans if s["name"] == "ingest"]
    (job,) = [s for s in receiver.spans if s["name"] == "job"]
    steps = [s for s in receiver.spans if s["name"] == "step"]
    # Two processes, one trace: the worker's job is the child of the ingest span.
    assert (ingest["role"], job["role"]) == ("ingest", "worker")
    assert ingest["parent"] is None
    assert job["trace_id"] == ingest["trace_id"] and job["parent"] == ingest["span_id"]
    assert steps and all(
        s["trace_id"] == job["trace_id"] and s["parent"] == job["span_id"] for s in steps
    )
    trace_id = job["trace_id"]
    ((stored,),) = serve.rows("SELECT traceparent FROM events")
    assert str(stored).startswith(f"00-{trace_id}-{ingest['span_id']}-")

    # Logged with the job's records (the worker's JSON lines) ...
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    done = [r for r in records if r.get("msg") == "job done"]
    assert [r.get("trace_id") for r in done] == [trace_id]
    # ... and shown by `events show`.
    (event_id,) = serve.rows("SELECT id FROM events")
    shown = cli("events", "show", str(event_id[0]), "--database", serve.database)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["traceId"] == trace_id


def test_tracing_enabled_without_the_extra_fails_the_start(tmp_path: Path) -> None:
    """A stand-in ``opentelemetry`` package that lacks the SDK: the start fails in one
    line naming the extra, before anything listens."""
    fake = tmp_path / "site" / "opentelemetry"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    env = {
        "LCCN_TRACING__ENABLED": "true",
        "PYTHONPATH": f"{tmp_path / 'site'}",
    }
    out = cli(
        "serve", "--port", "0", "--database", f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", env=env
    )
    assert out.returncode != 0
    assert "lccn-subscriber[otel]" in out.stderr, out.stderr
