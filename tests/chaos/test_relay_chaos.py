"""Chaos, relay: ``serve --role relay`` killed mid-stream, and its broker killed mid-stream.

* relay kill -9: every notification answered 204 is in the topic (Tacker got 204 only
  for records the brokers acknowledged); a restarted relay goes on producing.
* broker kill -9: while it is down the relay answers 503 (never 204) and ``/readyz``
  names the broker; once it is back on its port, 204 again, and every 204 is in the
  topic.

Tacker's side is the chaos harness's stream of op-occ chains posted over HTTP; the
workers' side (consume, store, dedup) is the kafka tier's and the e2e loop's.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiokafka import AIOKafkaConsumer

from tests.chaos.harness import Stream
from tests.kafka.helpers import create_topic, uid
from tests.programs import ServeProcess
from tests.testbed import kafka_broker

pytestmark = [pytest.mark.chaos, pytest.mark.kafka, pytest.mark.asyncio, pytest.mark.timeout(300)]


def relay_process(tmp: Path, bootstrap: str, topic: str, name: str) -> ServeProcess:
    config = tmp / f"{name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": [bootstrap], "topics": [topic]},
                "relay": {"id": name, "produce_timeout": 2.0},
                "log": {"format": "json", "level": "INFO"},
            }
        )
    )
    return ServeProcess(
        tmp,
        args=("--role", "relay", "--host", "127.0.0.1"),
        env={"LCCN_CONFIG": str(config)},
    )


async def topic_bodies(bootstrap: str, topic: str, within: float = 20) -> list[dict[str, Any]]:
    """Every record in the topic (read until a quiet second), as bodies."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=uid("g")
    )
    await consumer.start()
    out: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(within):
            quiet = 0
            while quiet < 2:
                batch = await consumer.getmany(timeout_ms=500)
                got = [json.loads(r.value) for part in batch.values() for r in part]
                out += got
                quiet = 0 if got else quiet + 1
    finally:
        await consumer.stop()
    return out


def _key(body: dict[str, Any]) -> tuple[str, str]:
    return body["vnfLcmOpOccId"], body["operationState"]


async def streaming(
    relay: ServeProcess, bootstrap: str, topic: str, partitions: int, *, senders: int, pause: float
) -> Stream:
    """``topic`` made, ``relay`` started and ready, and a stream of posts to it running."""
    await create_topic(bootstrap, topic, partitions=partitions)
    relay.start()
    await relay.ready()
    stream = Stream(lambda: [relay.url], senders=senders, pause=pause)
    stream.start()
    return stream


async def test_a_relay_killed_mid_stream_acknowledged_only_what_the_topic_holds(
    tmp_path: Path,
) -> None:
    broker = kafka_broker.start_broker(log=tmp_path / "tansu.log")
    topic = uid("relay-kill")
    relay = relay_process(tmp_path, broker.bootstrap, topic, "relay-a")
    try:
        stream = await streaming(relay, broker.bootstrap, topic, 3, senders=3, pause=0.01)
        await asyncio.sleep(3)
        relay.kill(signal.SIGKILL)  # mid-stream: sends in flight get no answer
        acked_at_kill = len(stream.acked)
        await asyncio.sleep(1)
        relay.start()  # the same port: Tacker's callback URI stays valid
        await relay.ready()
        await asyncio.sleep(3)
        await stream.stop()
        stored = {_key(b) for b in await topic_bodies(broker.bootstrap, topic)}
        acked = {_key(b) for b in stream.acked}
        missing = acked - stored
        print(
            f"relay kill -9: sent {stream.sent}, answered {dict(stream.answers)}, "
            f"acknowledged {len(acked)} ({acked_at_kill} before the kill), in topic "
            f"{len(stored)}, acknowledged but missing {len(missing)}"
        )
        assert not missing, sorted(missing)[:5]
        assert len(stream.acked) > acked_at_kill  # the restarted relay produced again
    finally:
        relay.stop()  # the restarted one: it outlived the run before
        broker.stop()


async def test_a_broker_killed_mid_stream_makes_the_relay_answer_503_and_say_why(
    tmp_path: Path,
) -> None:
    broker = kafka_broker.start_broker(log=tmp_path / "tansu.log")
    port = broker.port
    restarted: kafka_broker.Broker | None = None
    topic = uid("broker-kill")
    relay = relay_process(tmp_path, broker.bootstrap, topic, "relay-b")
    try:
        stream = await streaming(relay, broker.bootstrap, topic, 1, senders=2, pause=0.02)
        await asyncio.sleep(2)
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait(10)
        killed = time.time()
        await asyncio.sleep(5)
        async with aiohttp.ClientSession() as http:
            status, body = await relay.readyz(http)
        assert status == 503
        check = body["checks"]["kafka"]  # type: ignore[index]
        assert check["ok"] is False and check["detail"].startswith(broker.bootstrap)
        restarted = kafka_broker.start_broker(port=port, log=tmp_path / "tansu-2.log")
        await create_topic(restarted.bootstrap, topic, partitions=1)
        await relay.wait_readiness(True, timeout=60)
        acked_before = len(stream.acked)
        await asyncio.sleep(2)
        await stream.stop()
        # While the broker was down (past the produce timeout) nothing was answered 204.
        down = [s for t, s in stream.answered if killed + 2.5 < t < killed + 5]
        seen = [(round(t - killed, 2), s) for t, s in stream.answered if t > killed - 1]
        assert down and "204" not in down, seen[:40]
        assert len(stream.acked) > acked_before  # 204 again once it is back
        # Every 204 after the restart is in the new broker's topic (the old one kept
        # everything in memory and is gone).
        stored = {_key(b) for b in await topic_bodies(restarted.bootstrap, topic)}
        after = {_key(b) for b in stream.acked[acked_before:]}
        assert after <= stored, sorted(after - stored)[:5]
        print(
            f"broker kill -9: sent {stream.sent}, answered {dict(stream.answers)}, "
            f"503 while down {down.count('503')}"
        )
    finally:
        relay.stop()
        if restarted is not None:
            restarted.stop()
        broker.stop()
