"""Tracing (the ``otel`` extra) of Kafka ingest: one ingest span per record, its
traceparent stored with the record's event; a resent copy adds no trace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from subscriber import tracing
from subscriber.ingest.kafka import KafkaSource
from subscriber.store import Store
from tests.kafka.helpers import create_topic, fast_settings, produce, transitions, uid, wait_until

pytestmark = [pytest.mark.kafka]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)
        provider.shutdown()


async def test_each_record_opens_the_trace_its_event_stores(
    broker: Any, store: Store, spans: InMemorySpanExporter
) -> None:
    topic, group = uid("topic"), uid("group")
    await create_topic(broker.bootstrap, topic, 1)
    bodies = transitions(3)
    await produce(broker.bootstrap, topic, bodies + bodies[:1])  # the first one resent

    async with KafkaSource(fast_settings(broker.bootstrap, topic, group), store.events) as source:
        await wait_until(
            lambda: source.status().stored + source.status().duplicates >= 4, 60, what="stored"
        )

    ingest = [s for s in spans.get_finished_spans() if s.name == "ingest"]
    assert len(ingest) == 4
    assert all((s.attributes or {})["lccn.source"] == "kafka" for s in ingest)
    assert all(s.parent is None for s in ingest)  # each record its own trace
    stored = {
        (s.attributes or {})["lccn.event_id"]: s
        for s in ingest
        if not (s.attributes or {})["lccn.duplicate"]
    }
    events = await store.events.list()
    assert len(events) == 3 and {e.id for e in events} == set(stored)
    for event in events:
        span = stored[event.id]
        assert span.context is not None
        assert event.trace_id == f"{span.context.trace_id:032x}"
        assert event.vnf_lcm_op_occ_id == (span.attributes or {})["lccn.vnf_lcm_op_occ_id"]
