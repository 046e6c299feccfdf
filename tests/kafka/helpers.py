"""Helpers for the kafka tier: notifications, topics, producing, waiting."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from subscriber.config import DatabaseSettings, HttpSettings, KafkaSettings, Settings
from subscriber.service import Service
from tests.conftest import free_port
from tests.testbed import kafka_broker
from tests.testbed.records import notification, transitions

__all__ = [
    "create_topic",
    "delete_topic",
    "fast_settings",
    "kafka_worker",
    "notification",
    "produce",
    "transitions",
    "uid",
    "wait_until",
]


def uid(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def fast_settings(bootstrap: str, topic: str, group: str, **extra: Any) -> KafkaSettings:
    """Settings with timeouts short enough for tests (Tansu joins slowly otherwise)."""
    values: dict[str, Any] = {
        "bootstrap_servers": (bootstrap,),
        "topics": (topic,),
        "group_id": group,
        "session_timeout": 6.0,
        "heartbeat_interval": 0.5,
        "request_timeout": 5.0,
        "commit_interval": 0.2,
        "health_interval": 0.3,
        "revoke_drain_timeout": 2.0,
        "graceful_timeout": 5.0,
        "store_backoff_max": 1.0,
    }
    values.update(extra)
    return KafkaSettings(**values)


async def create_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


async def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


async def produce(
    bootstrap: str,
    topic: str,
    values: Iterable[bytes | dict[str, Any]],
    *,
    key: Callable[[Any], bytes | None] | None = None,
    headers: list[tuple[str, bytes]] | None = None,
    spread: int | None = None,
) -> int:
    """Send values (dicts become JSON, keyed by vnfInstanceId unless ``key`` says else).

    ``spread=N`` sends the i-th value to partition i % N instead of the key's partition,
    so that every partition gets some whatever the keys hash to.
    """
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    sent = 0
    try:
        futures = []
        for i, value in enumerate(values):
            if isinstance(value, dict):
                raw = json.dumps(value).encode()
                k = key(value) if key else value.get("vnfInstanceId", "").encode() or None
            else:
                raw = value
                k = key(value) if key else None
            partition = i % spread if spread else None
            futures.append(
                await producer.send(topic, raw, key=k, headers=headers, partition=partition)
            )
            sent += 1
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return sent


async def wait_until(
    condition: Callable[[], Awaitable[bool] | bool],
    within: float,
    *,
    interval: float = 0.1,
    what: str = "condition",
) -> None:
    """Poll ``condition`` until it is true; fail the test after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(interval)


def kafka_worker(kafka: KafkaSettings, directory: Path) -> Service:
    """A service (not started) that consumes ``kafka`` into a SQLite store in ``directory``."""
    return Service(
        Settings(
            http=HttpSettings(host="127.0.0.1", port=free_port()),
            database=DatabaseSettings(url=f"sqlite+aiosqlite:///{directory / 'lccn.db'}"),
            kafka=kafka,
        )
    )


@dataclass
class DurableBroker:
    """A broker of this test alone whose storage (an S3 store) outlives it: ``restart()``
    brings it back on its port with what it had, as a restarted Kafka broker comes back."""

    broker: kafka_broker.Broker
    storage: str
    env: dict[str, str]
    log: Path

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def stop(self) -> None:
        self.broker.stop()

    def restart(self) -> None:
        self.broker = kafka_broker.start_broker(
            self.broker.port, log=self.log, storage=self.storage, env=self.env
        )
