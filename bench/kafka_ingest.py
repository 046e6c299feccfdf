#!/usr/bin/env python3
"""Kafka ingest throughput: our source (parse + store + commit) against a bare consume loop.

Starts its own broker (Tansu, memory) on a free loopback port, produces N
notification records over 3 partitions, then consumes them twice, each time
with a fresh consumer group:

* bare: an aiokafka consumer that only counts records (no parsing, no store);
* parse only: KafkaSource with a sink that discards what it is given, to show
  how much of the gap is decoding and validation rather than the store;
* ours: KafkaSource into a Store on a temporary SQLite file, offsets committed.

Each rate counts from the first record seen to the last one consumed/stored, so
the broker's group join time is left out of both. The last line is
``ratio=<ours/bare>``.

    python bench/kafka_ingest.py [--records 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from subscriber.config import DatabaseSettings, KafkaSettings  # noqa: E402
from subscriber.heap import freeze_long_lived  # noqa: E402
from subscriber.ingest.kafka import KafkaSource  # noqa: E402
from subscriber.store import AppendResult, EventStore, NewEvent, Store  # noqa: E402
from tests.testbed import kafka_broker  # noqa: E402

PARTITIONS = 3
STATES = (("STARTING", "START"), ("PROCESSING", "START"), ("COMPLETED", "RESULT"))


def notifications(count: int) -> list[bytes]:
    run = uuid.uuid4().hex[:8]
    base = "http://127.0.0.1:9890/vnflcm/v2"
    out = []
    for i in range(count):
        vnf = f"vnf-{run}-{i % 200}"
        op_occ = f"opocc-{run}-{i // 3}"
        state, status = STATES[i % 3]
        body = {
            "id": str(uuid.uuid4()),
            "notificationType": "VnfLcmOperationOccurrenceNotification",
            "subscriptionId": "sub-1",
            "timeStamp": "2025-01-01T00:00:00Z",
            "notificationStatus": status,
            "operationState": state,
            "vnfInstanceId": vnf,
            "operation": "INSTANTIATE",
            "isAutomaticInvocation": False,
            "vnfLcmOpOccId": op_occ,
            "verbosity": "SHORT",
            "_links": {
                "vnfInstance": {"href": f"{base}/vnf_instances/{vnf}"},
                "subscription": {"href": f"{base}/subscriptions/sub-1"},
                "vnfLcmOpOcc": {"href": f"{base}/vnf_lcm_op_occs/{op_occ}"},
            },
        }
        out.append(json.dumps(body).encode())
    return out


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=20, max_batch_size=256 * 1024
    )
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value, key=json.loads(value)["vnfInstanceId"].encode())
            for value in values
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def bare(bootstrap: str, topic: str, count: int) -> float:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"bare-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    await consumer.start()
    seen = 0
    first = 0.0
    try:
        while seen < count:
            batches = await consumer.getmany(timeout_ms=200, max_records=500)
            for records in batches.values():
                if records and not first:
                    first = time.perf_counter()
                seen += len(records)
        return count / (time.perf_counter() - first)
    finally:
        await consumer.stop()


class _Timed:
    """A sink noting when the first append started and the last ended.

    With ``events`` it appends to the real event store; without, it stores
    nothing (KafkaSource's decoding, tracking and commits alone).
    """

    def __init__(self, events: EventStore | None, count: int) -> None:
        self._events = events
        self._count = count
        self.first = 0.0
        self.done = 0
        self.finished = asyncio.Event()
        self.last = 0.0

    async def append(self, new: NewEvent) -> AppendResult:
        return (await self.append_many([new]))[0]

    async def append_many(self, news: list[NewEvent]) -> list[AppendResult]:
        if not self.first:
            self.first = time.perf_counter()
        if self._events is None:
            results = [AppendResult(0, False) for _ in news]
        else:
            results = await self._events.append_many(news)
        self.done += len(news)
        if self.done >= self._count:
            self.last = time.perf_counter()
            self.finished.set()
        return results

    async def append_poison(self, **kwargs: Any) -> AppendResult:
        if self._events is None:
            return AppendResult(0, False)
        return await self._events.append_poison(**kwargs)


def _source_settings(bootstrap: str, topic: str) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers=(bootstrap,),
        topics=(topic,),
        group_id=f"ours-{uuid.uuid4().hex[:8]}",
        session_timeout=6.0,
        heartbeat_interval=0.5,
    )


async def parse_only(bootstrap: str, topic: str, count: int) -> float:
    sink = _Timed(None, count)
    async with KafkaSource(_source_settings(bootstrap, topic), sink):
        await asyncio.wait_for(sink.finished.wait(), 120)
    return count / (sink.last - sink.first)


async def ours(
    bootstrap: str, topic: str, count: int, workdir: Path, database: DatabaseSettings
) -> tuple[float, int]:
    async with Store(database) as store:
        timed = _Timed(store.events, count)
        async with KafkaSource(_source_settings(bootstrap, topic), timed) as source:
            await asyncio.wait_for(timed.finished.wait(), 120)
            rate = count / (timed.last - timed.first)
            stored = source.status().stored
        rows = len(await store.events.list())
    return rate, min(stored, rows)


async def main(count: int, group_commit_max: int, synchronous: str) -> int:
    logging.basicConfig(level=logging.ERROR)
    # As `serve` does once it has started (subscriber.service).
    freeze_long_lived()
    with tempfile.TemporaryDirectory(prefix="lccn-bench-") as tmp:
        workdir = Path(tmp)
        broker = kafka_broker.start_broker(log=workdir / "tansu.log")
        try:
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            values = notifications(count)
            started = time.perf_counter()
            await produce(broker.bootstrap, topic, values)
            print(f"produced {count} records in {time.perf_counter() - started:.1f}s")
            bare_rate = await bare(broker.bootstrap, topic, count)
            print(f"bare aiokafka consume loop: {bare_rate:,.0f} records/s")
            parse_rate = await parse_only(broker.bootstrap, topic, count)
            print(f"KafkaSource, parse only (sink discards): {parse_rate:,.0f} records/s")
            database = DatabaseSettings(
                url=f"sqlite+aiosqlite:///{workdir / 'bench.db'}",
                group_commit_max=group_commit_max,
                sqlite_synchronous=synchronous,  # type: ignore[arg-type]
            )
            our_rate, stored = await ours(broker.bootstrap, topic, count, workdir, database)
            print(f"KafkaSource (parse + SQLite store + commit): {our_rate:,.0f} records/s")
            if stored != count:
                print(f"error: stored {stored} events, expected {count}", file=sys.stderr)
                return 1
        finally:
            broker.stop()
    print(f"ratio={our_rate / bare_rate:.2f}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    defaults = DatabaseSettings()
    parser.add_argument("--group-commit-max", type=int, default=defaults.group_commit_max)
    parser.add_argument(
        "--sqlite-synchronous",
        choices=("OFF", "NORMAL", "FULL"),
        default=defaults.sqlite_synchronous,
    )
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.records, args.group_commit_max, args.sqlite_synchronous)))
