#!/usr/bin/env python3
"""Kafka ingest throughput: our source (parse + store + commit) against the job's floor.

Starts its own broker (Tansu, memory) on a free loopback port, produces N
notification records over 3 partitions, then consumes them several times, each
time with a fresh consumer group (and, where something is stored, a fresh store):

* floor (the baseline): a plain aiokafka consumer doing the least this job must
  do: decode each record's JSON, insert the same rows into a table with the
  events table's schema and indexes (created from subscriber/store/tables.py,
  so it cannot drift), ON CONFLICT DO NOTHING on the dedup key, one transaction
  per fetched batch with the same durability as ours (SQLite WAL,
  synchronous=FULL by default), and commit the batch's offsets after it;
* bare (context): an aiokafka consumer that only counts records;
* parse only (context): KafkaSource with a sink that discards what it is given,
  to show how much is decoding and validation rather than the store;
* ours: KafkaSource into a Store (migrated schema), offsets committed.

Everything runs in this one process (plus the broker's); each rate counts from
the first record seen to the last one stored (floor: and its offsets committed),
so group join time is left out. The last line is ``ratio=<ours/floor>``.

Floor and ours are measured in alternating rounds (three by default) and their
medians compared.

    python bench/kafka_ingest.py [--records 50000] [--rounds 3] [--database postgresql+asyncpg://...]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from benchlib import (
    add_database_argument,
    backend_name,
    durability,
    machine,
    scratch_database,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from schemas import STATE_RANK
from subscriber.config import DatabaseSettings, KafkaSettings
from subscriber.heap import freeze_long_lived
from subscriber.ingest.kafka import KafkaSource
from subscriber.store import AppendResult, EventStore, NewEvent, Store
from subscriber.store.tables import events, with_partial_indexes
from tests.testbed import kafka_broker
from tests.testbed.records import transitions

PARTITIONS = 3


def notifications(count: int) -> list[bytes]:
    return [json.dumps(body).encode() for body in transitions(count, instances=200)]


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


def _from_the_start(bootstrap: str, topic: str, group: str, **options: Any) -> AIOKafkaConsumer:
    """A consumer of ``topic`` from its first record, in a new group named after ``group``,
    that commits its offsets itself (the bare and the floor readers)."""
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"{group}-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        **options,
    )


async def bare(bootstrap: str, topic: str, count: int) -> float:
    consumer = _from_the_start(bootstrap, topic, "bare")
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


# -- the floor: a plain consumer that stores every record durably -----------------

CLIENT_ID = KafkaSettings().client_id


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        value = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()


def floor_row(record: Any, now: float) -> dict[str, Any]:
    """The events row of one record, from its JSON alone (no schema validation).

    The same values our store writes for it (tests/unit/test_bench.py checks),
    so both sides write the same bytes.
    """
    meta = {
        "kafka": {
            "consumer": CLIENT_ID,
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            "record_key": None if record.key is None else record.key.decode(),
            "headers": [[k, v.decode()] for k, v in record.headers or ()],
        }
    }
    return floor_values(record.value, now, source="kafka", meta=meta, api_version=None)


def floor_values(
    raw: bytes, now: float, *, source: str, meta: dict[str, Any] | None, api_version: str | None
) -> dict[str, Any]:
    """The events row of one notification's JSON ``raw``, decoded and nothing more (the
    floors of the Kafka and the HTTP bench)."""
    body = json.loads(raw)
    occ = body.get("vnfLcmOpOccId")
    state = body.get("operationState")
    status = body.get("notificationStatus")
    if occ is not None:
        key = f"opocc|{occ}|{state}|{status}"
    else:
        key = f"ident|{body['notificationType']}|{body['vnfInstanceId']}"
    return {
        "received_at": now,
        "updated_at": now,
        "source": source,
        "notification_type": body["notificationType"],
        "notification_id": body["id"],
        "vnf_instance_id": body["vnfInstanceId"],
        "vnf_lcm_op_occ_id": occ,
        "operation": body.get("operation"),
        "operation_state": state,
        "notification_status": status,
        "state_rank": STATE_RANK.get(state) if occ is not None else None,
        "dedup_key": key,
        "api_version": api_version,
        "body": raw.decode(),
        "meta": json.dumps(meta, separators=(",", ":")) if meta else None,
        "status": "pending",
        "status_detail": None,
        "notified_at": _epoch(body.get("timeStamp")) if occ is not None else None,
        "op_occ_attempt": 0,
        "traceparent": None,  # tracing off, as in the runs compared
    }


class FloorTable:
    """The events table alone, written one transaction per call.

    SQLite: a synchronous engine on one thread (the event loop keeps
    fetching meanwhile), WAL and the given ``synchronous``. PostgreSQL: the
    asyncpg engine.
    """

    def __init__(self, url: str, synchronous: str) -> None:
        self._sqlite = backend_name(url) == "SQLite"
        dialect = sqlite if self._sqlite else postgresql
        self._insert = dialect.insert(events).on_conflict_do_nothing(index_elements=["dedup_key"])
        if self._sqlite:
            self._engine = sa.create_engine(str(make_url(url).set(drivername="sqlite")))

            @sa.event.listens_for(self._engine, "connect")
            def _pragmas(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA synchronous={synchronous}")
                cur.close()

            self._thread = ThreadPoolExecutor(1, thread_name_prefix="floor-writer")
        else:
            self._async = create_async_engine(url)

    async def create(self) -> None:
        # Only the events table: its columns, unique key and indexes.
        if self._sqlite:
            await self._in_thread(lambda: with_partial_indexes().create_all(self._engine, [events]))
        else:
            async with self._async.begin() as conn:
                await conn.run_sync(with_partial_indexes().create_all, [events])

    async def insert(self, rows: Sequence[dict[str, Any]]) -> None:
        if self._sqlite:

            def write() -> None:
                with self._engine.begin() as conn:
                    conn.execute(self._insert, rows)

            await self._in_thread(write)
        else:
            async with self._async.begin() as conn:
                await conn.execute(self._insert, rows)

    async def count(self) -> int:
        query = sa.select(sa.func.count()).select_from(events)
        if self._sqlite:

            def read() -> int:
                with self._engine.connect() as conn:
                    return int(conn.execute(query).scalar_one())

            result: int = await self._in_thread(read)
            return result
        async with self._async.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def close(self) -> None:
        if self._sqlite:
            self._engine.dispose()
            self._thread.shutdown()
        else:
            await self._async.dispose()

    async def _in_thread(self, fn: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn)


async def floor(bootstrap: str, topic: str, count: int, url: str, synchronous: str) -> float:
    """Records/s of the plain consumer: getmany, rows, one transaction, commit offsets."""
    table = FloorTable(url, synchronous)
    await table.create()
    consumer = _from_the_start(bootstrap, topic, "floor", client_id=CLIENT_ID)
    max_records = KafkaSettings().max_poll_records  # ours fetches this many at most too
    await consumer.start()
    done = 0
    first = 0.0
    try:
        while done < count:
            batches = await consumer.getmany(timeout_ms=200, max_records=max_records)
            records = [r for part in batches.values() for r in part]
            if not records:
                continue
            if not first:
                first = time.perf_counter()
            now = time.time()
            await table.insert([floor_row(r, now) for r in records])
            await consumer.commit()  # the positions just past this batch: all stored
            done += len(records)
        rate = count / (time.perf_counter() - first)
    finally:
        await consumer.stop()
        stored = await table.count()
        await table.close()
    if stored != count:
        raise RuntimeError(f"floor stored {stored} rows, expected {count}")
    return rate


# -- our source ------------------------------------------------------------------


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

    async def append_many(self, news: Sequence[NewEvent]) -> list[AppendResult]:
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


async def main(
    count: int, server: str, group_commit_max: int, synchronous: str, rounds: int
) -> int:
    logging.basicConfig(level=logging.ERROR)
    # As `serve` does once it has started (subscriber.service).
    freeze_long_lived()
    print(
        f"Kafka ingest of {count:,} notification records ({PARTITIONS} partitions, one Tansu "
        "broker on loopback) into the events table"
    )
    print(f"store: {await durability(server, synchronous)}")
    print(
        "processes: this one (consumers, store client) + the broker"
        + ("" if backend_name(server) == "SQLite" else " + the PostgreSQL server")
    )
    print(machine())
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
            print(f"context: bare aiokafka loop, counts only: {bare_rate:,.0f} records/s")
            parse_rate = await parse_only(broker.bootstrap, topic, count)
            print(f"context: KafkaSource, parse only (sink discards): {parse_rate:,.0f} records/s")
            # Floor and ours alternate, each measured `rounds` times, and the
            # medians are compared: on a shared machine one pair alone moved by
            # 0.67-0.95 between consecutive runs, mostly in the floor's figure.
            floor_rates: list[float] = []
            our_rates: list[float] = []
            for round_ in range(1, rounds + 1):
                async with scratch_database(server, workdir, f"floor{round_}") as url:
                    floor_rates.append(
                        await floor(broker.bootstrap, topic, count, url, synchronous)
                    )
                async with scratch_database(server, workdir, f"ours{round_}") as url:
                    database = DatabaseSettings(
                        url=url,
                        group_commit_max=group_commit_max,
                        sqlite_synchronous=synchronous,  # type: ignore[arg-type,unused-ignore]
                    )
                    our_rate, stored = await ours(broker.bootstrap, topic, count, workdir, database)
                our_rates.append(our_rate)
                print(
                    f"round {round_}: floor {floor_rates[-1]:,.0f}, ours {our_rate:,.0f} records/s"
                )
                if stored != count:
                    print(f"error: stored {stored} events, expected {count}", file=sys.stderr)
                    return 1
            floor_rate = statistics.median(floor_rates)
            our_rate = statistics.median(our_rates)
            print(
                "floor: plain aiokafka consumer, JSON decode + insert into the events table "
                f"(one transaction per fetch) + offset commit: {floor_rate:,.0f} records/s "
                f"(median of {rounds})"
            )
            print(
                f"ours: KafkaSource (validate + store + commit): {our_rate:,.0f} records/s "
                f"(median of {rounds})"
            )
        finally:
            broker.stop()
    print(f"ratio={our_rate / floor_rate:.2f}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3, help="floor/ours pairs (medians compared)")
    add_database_argument(parser)
    defaults = DatabaseSettings()
    parser.add_argument("--group-commit-max", type=int, default=defaults.group_commit_max)
    parser.add_argument(
        "--sqlite-synchronous",
        choices=("OFF", "NORMAL", "FULL"),
        default=defaults.sqlite_synchronous,
    )
    args = parser.parse_args()
    sys.exit(
        asyncio.run(
            main(
                args.records,
                args.database,
                args.group_commit_max,
                args.sqlite_synchronous,
                args.rounds,
            )
        )
    )
