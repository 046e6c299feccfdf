"""Tracing (the ``otel`` extra) of Kafka ingest: one ingest span per record, its
traceparent stored with the record's event; a resent copy adds no trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from subscriber.ingest.kafka import KafkaSource
from subscriber.store import Store
from tests.kafka.helpers import (
    create_topic,
    fast_settings,
    kafka_worker,
    notification,
    produce,
    transitions,
    uid,
    wait_until,
)
from tests.kafka.test_relay import ready_to_produce, relay_settings, start_relay, url

pytestmark = [pytest.mark.kafka]
__all__ = ["start_relay"]  # the relay tests' fixture, used here too


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


async def test_a_relayed_notification_continues_the_relays_trace(
    broker: Any, start_relay: Any, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    """relay (callback ingest) -> record header -> worker's Kafka ingest -> job: one trace."""
    topic, group = uid("relay"), uid("g")
    await create_topic(broker.bootstrap, topic, 1)
    kafka = fast_settings(broker.bootstrap, topic, group)
    relay = await start_relay(relay_settings(kafka))
    worker = kafka_worker(kafka, tmp_path)
    await worker.start()
    try:
        body = notification(uid("vnf"), uid("occ"), "STARTING", "START")
        async with aiohttp.ClientSession() as http:
            await ready_to_produce(relay, http)
            async with http.post(url(relay), json=body) as resp:
                assert resp.status == 204

        async def done() -> bool:
            return [e.status for e in await worker.store.events.list()] == ["done"]

        await wait_until(done, 60, what="the worker to run the relayed notification's job")
    finally:
        await worker.stop()
    finished = spans.get_finished_spans()
    relayed, consumed = sorted(
        (s for s in finished if s.name == "ingest"), key=lambda s: s.start_time or 0
    )
    (job,) = [s for s in finished if s.name == "job"]
    assert (relayed.attributes or {})["lccn.source"] == "http" and relayed.parent is None
    assert consumed.parent is not None and relayed.context is not None
    assert consumed.parent.span_id == relayed.context.span_id
    assert job.parent is not None and consumed.context is not None
    assert job.parent.span_id == consumed.context.span_id
    assert len({s.context.trace_id for s in finished if s.context is not None}) == 1
