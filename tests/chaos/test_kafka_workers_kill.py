"""Chaos, the Kafka layout: Tacker's stream through ``serve --role relay`` to the topic, two
``serve`` workers in one consumer group on PostgreSQL, one of them SIGKILLed mid-job each
round and started again.

The killed worker's partitions go to the other (the group rebalances), and its lanes too,
once their leases are known dead (its pid is gone) or expire; a job cut off mid-step
resumes at its checkpoint there. At the end:

* every notification the relay acknowledged (204) is stored exactly once (a record
  consumed again after the kill is a duplicate, not a second event);
* every event is terminal;
* no non-idempotent step ran twice, and no two runs of one instance overlapped across
  processes.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from tests.backends import pg_database, pg_dsn
from tests.chaos.harness import Replica, Stream, check_store, pg_rows, settle
from tests.chaos.test_relay_chaos import relay_process
from tests.fence_handler import handler_env, marks, overlaps
from tests.kafka.helpers import create_topic, uid
from tests.testbed import kafka_broker

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.kafka,
    pytest.mark.postgres,
    pytest.mark.asyncio,
    pytest.mark.timeout(420),
]

ROUNDS = 3


async def consumed(dsn: str, ids: set[str], within: float = 120) -> None:
    """Wait until the workers stored every acknowledged notification: a group that lost a
    member takes its session timeout to give its partitions to the other."""
    async with asyncio.timeout(within):
        while True:
            stored = {r[0] for r in await pg_rows(dsn, "SELECT notification_id FROM events")}
            if ids <= stored:
                return
            await asyncio.sleep(0.5)


async def test_a_worker_killed_mid_job_loses_nothing_and_never_runs_a_step_twice(
    tmp_path: Path,
) -> None:
    rng = random.Random()
    broker = kafka_broker.start_broker(log=tmp_path / "tansu.log")
    topic, group = uid("tacker-events"), uid("workers")
    effects = tmp_path / "side_effects.txt"
    env = {
        **handler_env(effects, 0.05, lease_ttl=3),
        "LCCN_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap,
        "LCCN_KAFKA__TOPICS": topic,
        "LCCN_KAFKA__GROUP_ID": group,
        "LCCN_KAFKA__SESSION_TIMEOUT": "6",
        "LCCN_KAFKA__HEARTBEAT_INTERVAL": "0.5",
        "LCCN_KAFKA__COMMIT_INTERVAL": "0.2",
    }
    killed: dict[int, tuple[float, float]] = {}
    relay = relay_process(tmp_path, broker.bootstrap, topic, "relay-w")
    try:
        await create_topic(broker.bootstrap, topic, partitions=4)
        async with pg_database() as url:
            pg = pg_dsn(url)
            workers = [Replica(n, tmp_path, url, env) for n in ("a", "b")]
            stream = Stream(lambda: [relay.url], senders=2, pause=0.05)
            try:
                for worker in workers:
                    worker.start()
                    await worker.ready()
                relay.start()
                await relay.ready()
                stream.start()
                for _ in range(ROUNDS):
                    await asyncio.sleep(rng.uniform(1.0, 3.0))
                    victim = rng.choice(workers)
                    pid = victim.pid
                    victim.stop()  # SIGKILL: its steps cut off, its partitions and lanes free
                    killed[pid] = (time.time(), float("inf"))
                    victim.start()
                    await victim.ready()
                await stream.stop()
                await consumed(pg, {b["id"] for b in stream.acked})
                await settle(pg)
                figures = await check_store(pg, stream.sent, stream.acked, effects)
            finally:
                for worker in workers:
                    worker.stop()
    finally:
        relay.stop()
        broker.stop()
    overlapping = overlaps(marks(effects), killed)
    print(figures.line("relay + Kafka, 2 workers, kill -9 one", overlapping_runs=overlapping))
    assert overlapping == 0, "two workers ran one instance at once"
    assert figures.acked > ROUNDS * 10
