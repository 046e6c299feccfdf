"""The relay role on the real Kafka-protocol broker (Tansu): Tacker's callback produced to
the topic, keyed by vnfInstanceId, 204 only once the broker acknowledged, 503 while it
cannot; the same validation and ProblemDetails as serve's callback; workers consume what
it produced."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer

from subscriber.config import (
    HttpSettings,
    KafkaSettings,
    RelaySettings,
    Settings,
)
from subscriber.relay import Relay
from tests.conftest import Started, free_port, metric
from tests.kafka.helpers import (
    create_topic,
    fast_settings,
    kafka_worker,
    notification,
    uid,
    wait_until,
)
from tests.testbed import kafka_broker

pytestmark = [pytest.mark.kafka, pytest.mark.asyncio]

Start = Callable[..., Any]


def relay_settings(kafka: KafkaSettings, **relay: Any) -> Settings:
    return Settings(
        http=HttpSettings(host="127.0.0.1", port=free_port()),
        kafka=kafka,
        relay=RelaySettings(**{"id": "relay-test", "produce_timeout": 3.0, **relay}),
    )


@pytest.fixture
async def start_relay() -> AsyncIterator[Start]:
    async with Started(Relay) as start:
        yield start


def url(relay: Relay, path: str | None = None) -> str:
    return f"http://127.0.0.1:{relay.port}{path or relay.settings.http.path}"


async def consume(bootstrap: str, topic: str, count: int, within: float = 30.0) -> list[Any]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=uid("g")
    )
    await consumer.start()
    records: list[Any] = []
    try:
        async with asyncio.timeout(within):
            while len(records) < count:
                batch = await consumer.getmany(timeout_ms=500)
                for part in batch.values():
                    records.extend(part)
    finally:
        await consumer.stop()
    return records


async def ready_to_produce(relay: Relay, http: aiohttp.ClientSession) -> None:
    async def ready() -> bool:
        async with http.get(url(relay, "/readyz")) as resp:
            return resp.status == 200

    await wait_until(ready, 30, what="the relay's producer to connect")


async def test_each_notification_is_produced_keyed_by_its_instance_once_acknowledged(
    broker: kafka_broker.Broker, start_relay: Start
) -> None:
    topic = uid("relay")
    await create_topic(broker.bootstrap, topic, partitions=3)
    relay = await start_relay(relay_settings(fast_settings(broker.bootstrap, topic, uid("g"))))
    sent = [notification(uid("vnf"), uid("occ"), "COMPLETED", "RESULT") for _ in range(6)]
    async with aiohttp.ClientSession() as http:
        await ready_to_produce(relay, http)
        async with http.post(url(relay), json=sent[0], headers={"Version": "2.0.0"}) as resp:
            assert resp.status == 204
        for body in sent[1:]:
            async with http.post(url(relay), json=body) as resp:
                assert resp.status == 204
        async with http.get(url(relay, "/readyz")) as resp:
            ready = await resp.json()
        async with http.get(url(relay, "/metrics")) as resp:
            text = await resp.text()
    records = await consume(broker.bootstrap, topic, len(sent))
    by_key = {r.key.decode(): r for r in records}
    assert set(by_key) == {n["vnfInstanceId"] for n in sent}  # keyed by vnfInstanceId
    for body in sent:
        record = by_key[body["vnfInstanceId"]]
        assert json.loads(record.value) == body  # the body as Tacker sent it
        headers = dict(record.headers)
        assert headers["lccn-api-version"] == b"2.0.0"  # the header, else from the links
        assert headers["lccn-relay"] == b"relay-test"
        assert float(headers["lccn-received-at"]) > 0
    assert ready["checks"]["kafka"] == {
        "ok": True,
        "detail": f"{broker.bootstrap}: producing to {topic} (not idempotent)",
    }
    assert metric(text, f'lccn_relay_produced_total{{topic="{topic}"}}') == len(sent)
    assert metric(text, "lccn_relay_produce_seconds_count") == len(sent)


async def test_bad_input_gets_the_same_problem_details_as_serve_and_nothing_is_produced(
    broker: kafka_broker.Broker, start_relay: Start
) -> None:
    topic = uid("relay")
    await create_topic(broker.bootstrap, topic, partitions=1)
    settings = relay_settings(fast_settings(broker.bootstrap, topic, uid("g")))
    settings = settings.model_copy(
        update={"http": settings.http.model_copy(update={"max_body_bytes": 2048})}
    )
    relay = await start_relay(settings)
    good = notification(uid("vnf"), uid("occ"), "STARTING", "START")
    async with aiohttp.ClientSession() as http:
        await ready_to_produce(relay, http)
        bad = {**good, "vnfInstanceId": "../../v1.0/vims"}
        async with http.post(url(relay), json=bad) as resp:
            assert resp.status == 400
            assert resp.content_type == "application/problem+json"
            assert (await resp.json())["status"] == 400
        async with http.post(url(relay), data=b"{not json", headers=_json()) as resp:
            assert resp.status == 400
        async with http.post(url(relay), data=b"x" * 4096, headers=_json()) as resp:
            assert resp.status == 413
        async with http.post(url(relay), json=good) as resp:
            assert resp.status == 204
    (record,) = await consume(broker.bootstrap, topic, 1)
    assert json.loads(record.value) == good


def _json() -> dict[str, str]:
    return {"Content-Type": "application/json"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_while_no_broker_answers_the_callback_is_503_and_readyz_says_why(
    start_relay: Start,
) -> None:
    nowhere = f"127.0.0.1:{_closed_port()}"
    relay = await start_relay(
        relay_settings(fast_settings(nowhere, uid("relay"), uid("g")), produce_timeout=1.0)
    )
    body = notification(uid("vnf"), uid("occ"), "COMPLETED", "RESULT")
    async with aiohttp.ClientSession() as http:
        async with http.post(url(relay), json=body) as resp:
            assert resp.status == 503  # never 204: nothing was made durable
            assert resp.headers["Retry-After"] == "1"
            assert "no Kafka broker answered" in (await resp.json())["detail"]
        async with http.get(url(relay, "/readyz")) as resp:
            assert resp.status == 503
            check = (await resp.json())["checks"]["kafka"]
        async with http.get(url(relay, "/metrics")) as resp:
            text = await resp.text()
    assert check["ok"] is False and check["detail"].startswith(nowhere)
    assert metric(text, 'lccn_relay_produce_failures_total{reason="unavailable"}') == 1


async def test_a_broker_that_comes_late_is_produced_to_once_it_answers(
    tmp_path: Any, start_relay: Start
) -> None:
    port = _closed_port()
    topic = uid("relay")
    relay = await start_relay(
        relay_settings(fast_settings(f"127.0.0.1:{port}", topic, uid("g")), produce_timeout=2.0)
    )
    body = notification(uid("vnf"), uid("occ"), "COMPLETED", "RESULT")
    async with aiohttp.ClientSession() as http:
        async with http.post(url(relay), json=body) as resp:
            assert resp.status == 503
        late = kafka_broker.start_broker(log=tmp_path / "tansu.log", port=port)
        try:
            await create_topic(late.bootstrap, topic, partitions=1)
            await ready_to_produce(relay, http)
            async with http.post(url(relay), json=body) as resp:
                assert resp.status == 204
            (record,) = await consume(late.bootstrap, topic, 1)
            assert json.loads(record.value) == body
        finally:
            await relay.stop()
            late.stop()


async def test_workers_store_what_the_relay_produced_with_its_api_version(
    broker: kafka_broker.Broker, start_relay: Start, tmp_path: Any
) -> None:
    topic, group = uid("relay"), uid("g")
    await create_topic(broker.bootstrap, topic, partitions=3)
    kafka = fast_settings(broker.bootstrap, topic, group)
    relay = await start_relay(relay_settings(kafka))
    worker = kafka_worker(kafka, tmp_path)
    await worker.start()
    try:
        v1 = notification(uid("vnf"), uid("occ"), "COMPLETED", "RESULT")
        v1["_links"]["vnfInstance"]["href"] = "http://127.0.0.1:9890/vnflcm/v1/vnf_instances/x"
        v2 = notification(uid("vnf"), uid("occ"), "STARTING", "START")
        async with aiohttp.ClientSession() as http:
            await ready_to_produce(relay, http)
            for body in (v1, v2, v2):  # Tacker-style resend: stored once
                async with http.post(url(relay), json=body) as resp:
                    assert resp.status == 204

        async def stored() -> bool:
            return len(await worker.store.events.list()) == 2

        await wait_until(stored, 60, what="the worker to store the relayed notifications")
        events = {e.vnf_instance_id: e for e in await worker.store.events.list()}
        assert events[v1["vnfInstanceId"]].api_version == "1.3.0"
        assert events[v2["vnfInstanceId"]].api_version == "2.0.0"
        assert {e.source for e in events.values()} == {"kafka"}
    finally:
        await worker.stop()
