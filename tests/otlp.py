"""An OTLP/HTTP traces endpoint over loopback: what ``serve`` (or the image's) exports."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.loopback import listen


class OtlpReceiver:
    """Every span received, with its process's ``lccn.role``; ``url`` is the base URL
    (the traces path is ``/v1/traces``)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.received = asyncio.Event()
        self.app = web.Application()
        self.app.router.add_post("/v1/traces", self._traces)
        self.url = ""

    def named(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"] == name]

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


@asynccontextmanager
async def otlp_receiver() -> AsyncIterator[OtlpReceiver]:
    found = OtlpReceiver()
    runner = web.AppRunner(found.app)
    found.url = await listen(runner)
    try:
        yield found
    finally:
        await runner.cleanup()
