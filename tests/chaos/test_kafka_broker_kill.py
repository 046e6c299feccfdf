"""Chaos, Kafka: the broker killed (kill -9) mid-stream and started again on its storage.

The broker (Tansu) keeps its topic in an S3 store (tests/testbed/s3_store.py),
so its records and the group's committed offsets outlive it. One ``serve``
(PostgreSQL store, tests/fence_handler.py's steps) consumes the topic while
notifications also stream over HTTP. Mid-stream the broker is SIGKILLed and
started again after a few seconds, same port, same storage. Meanwhile:

* ``serve`` keeps running and keeps taking HTTP notifications; ``/readyz``
  says not ready, naming Kafka, while the broker is down, and ready again after;
* produce calls fail while the broker is down (those records are not counted
  as acknowledged) and succeed again after;

and at the end every record the broker acknowledged (``acks=all``) and every
HTTP notification answered 204 is stored exactly once, every event is
terminal, and no non-idempotent step ran twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from tests.backends import pg_database, pg_dsn
from tests.chaos.harness import (
    Replica,
    Stream,
    check_store,
    pg_rows,
    settle,
)
from tests.factories import op_occ, uid
from tests.fence_handler import handler_env
from tests.kafka.helpers import create_topic
from tests.testbed.kafka_broker import Broker, free_port, start_broker
from tests.testbed.s3_store import S3Store, start_s3

pytestmark = [pytest.mark.chaos, pytest.mark.kafka, pytest.mark.postgres, pytest.mark.asyncio]

DOWN_SECONDS = 6.0
TOPIC = "lccn-chaos"


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3Store]:
    store = start_s3(log=tmp_path / "s3.log")
    try:
        yield store
    finally:
        store.stop()


class Producer:
    """Produces op-occ chains keyed by instance until stopped; keeps what the broker acked."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.sent = 0
        self.acked: list[dict[str, Any]] = []
        self.failed = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        async with asyncio.timeout(60):
            await self._task

    async def _run(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            request_timeout_ms=3000,
            retry_backoff_ms=200,
        )
        await producer.start()
        try:
            while not self._stop.is_set():
                inst, occ = uid(), uid()
                for state in ("STARTING", "PROCESSING", "COMPLETED"):
                    body = op_occ(instance=inst, op_occ_id=occ, state=state)
                    self.sent += 1
                    try:
                        async with asyncio.timeout(5):
                            await producer.send_and_wait(
                                TOPIC, json.dumps(body).encode(), key=inst.encode()
                            )
                    except (KafkaError, TimeoutError):
                        self.failed += 1  # not acknowledged: may or may not be stored
                        await asyncio.sleep(0.2)
                        continue
                    self.acked.append(body)
                    await asyncio.sleep(0.01)
        finally:
            async with asyncio.timeout(15):
                await producer.stop()


async def test_broker_killed_and_restarted_mid_stream_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, s3: S3Store
) -> None:
    effects = tmp_path / "side_effects.txt"
    port = free_port()

    def broker_up() -> Broker:
        return start_broker(
            port, log=tmp_path / "tansu.log", storage=s3.tansu_url, env=s3.client_env
        )

    broker = broker_up()
    bootstrap = broker.bootstrap
    env = {
        **handler_env(effects, 0.05, lease_ttl=5),
        "LCCN_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "LCCN_KAFKA__TOPICS": TOPIC,
        "LCCN_KAFKA__GROUP_ID": "lccn-chaos-" + uid()[:8],
        "LCCN_KAFKA__SESSION_TIMEOUT": "6",
        "LCCN_KAFKA__HEARTBEAT_INTERVAL": "0.5",
        "LCCN_KAFKA__REQUEST_TIMEOUT": "5",
        "LCCN_KAFKA__COMMIT_INTERVAL": "0.2",
        "LCCN_KAFKA__HEALTH_INTERVAL": "0.3",
        "LCCN_KAFKA__REVOKE_DRAIN_TIMEOUT": "2",
        "LCCN_KAFKA__STORE_BACKOFF_MAX": "1",
    }
    try:
        await create_topic(bootstrap, TOPIC)
        async with pg_database() as url:
            pg = pg_dsn(url)
            serve = Replica("a", tmp_path, url, env)
            stream = Stream(lambda: [serve.url], senders=2, pause=0.02)
            producer = Producer(bootstrap)
            try:
                serve.start()
                await serve.ready()
                await serve.wait_readiness(True, timeout=60)  # the consumer joined
                stream.start()
                producer.start()
                await asyncio.sleep(3)
                acked_before = len(producer.acked)
                broker.process.kill()  # SIGKILL
                broker.process.wait(10)
                body = await serve.wait_readiness(False, timeout=20)
                assert body["checks"]["kafka"]["ok"] is False
                http_during = len(stream.acked)
                await asyncio.sleep(DOWN_SECONDS)
                assert serve.alive(), "serve died with the broker"
                assert len(stream.acked) > http_during, "HTTP ingest stopped with the broker"
                broker = broker_up()
                await serve.wait_readiness(True, timeout=60)
                acked_at_recovery = len(producer.acked)
                await asyncio.sleep(3)
                await producer.stop()
                await stream.stop()
                acked = stream.acked + producer.acked
                wanted = {b["id"] for b in acked}
                async with asyncio.timeout(90):
                    while True:
                        ids = {
                            r[0] for r in await pg_rows(pg, "SELECT notification_id FROM events")
                        }
                        if wanted <= ids:
                            break
                        await asyncio.sleep(0.3)
                await settle(pg)
                sources = dict(
                    await pg_rows(pg, "SELECT source, COUNT(*) FROM events GROUP BY source")
                )
                figures = await check_store(pg, stream.sent + producer.sent, acked, effects)
            finally:
                serve.stop()
    finally:
        broker.stop()

    print(
        figures.line(
            "kafka broker kill -9 + restart",
            kafka_sent=producer.sent,
            kafka_acked=len(producer.acked),
            kafka_failed=producer.failed,
            http_sent=stream.sent,
            http_acked=len(stream.acked),
            stored_by_source=sources,
        )
    )
    assert acked_before > 0 and len(producer.acked) > acked_at_recovery
