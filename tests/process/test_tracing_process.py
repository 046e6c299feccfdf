"""Tracing across ``serve``'s processes: the ingest process stores the traceparent with
the event, the forked worker continues that trace, both export over OTLP/HTTP (to a
receiver in this test), and ``events show`` prints the trace id."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.otlp import OtlpReceiver, otlp_receiver
from tests.programs import ServeProcess, cli


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    async with otlp_receiver() as found:
        yield found


async def test_the_worker_continues_the_trace_ingest_stored(
    tmp_path: Path, receiver: OtlpReceiver
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
