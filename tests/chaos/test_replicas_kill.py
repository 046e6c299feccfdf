"""Chaos, PostgreSQL: three ``serve`` replicas, a random one SIGKILLed and restarted each round.

Notifications stream over HTTP, round robin over the replicas alive (as behind
a load balancer), while every round kills one replica at a random moment and
starts it again. A killed replica's lanes are taken over at once by the
others (its pid is gone, so its leases are known dead). At the end:

* every acknowledged (204) notification is stored exactly once;
* every event is terminal;
* no non-idempotent step ran twice, and no two runs of one instance overlapped
  across processes (a killed process's run ends at its kill).

``LCCN_CHAOS_ROUNDS`` (default 10) and ``LCCN_CHAOS_SEED`` tune it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.backends import pg_database
from tests.factories import op_occ, uid
from tests.fence_handler import double_runs, marks, overlaps
from tests.test_fencing_process import Replica

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.asyncio]

ROUNDS = int(os.environ.get("LCCN_CHAOS_ROUNDS", "10"))
SEED = int(os.environ.get("LCCN_CHAOS_SEED", str(random.randrange(1 << 30))))
TERMINAL = ("done", "failed", "stale", "ignored")


async def test_three_replicas_one_killed_each_round_lose_nothing_and_never_run_twice(
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    effects = tmp_path / "side_effects.txt"
    effects.touch()
    env = {
        "LCCN_HANDLERS__MODULES": json.dumps(["tests.fence_handler"]),
        "LCCN_TEST_SIDE_EFFECTS": str(effects),
        "LCCN_TEST_STEP_SECONDS": "0.05",
        "LCCN_DISPATCH__LEASE_TTL": "3",
        "LCCN_DISPATCH__RESCAN_INTERVAL": "0.3",
        "LCCN_DISPATCH__REORDER_WINDOW": "0.05",
    }
    acked: list[dict[str, Any]] = []
    sent = 0
    killed: dict[int, tuple[float, float]] = {}  # pid -> (killed at, forever)
    stop_stream = asyncio.Event()
    async with pg_database() as url:
        pg = url.replace("postgresql+asyncpg://", "postgresql://")
        replicas = [Replica(n, tmp_path, url, env) for n in ("a", "b", "c")]
        alive: list[Replica] = []

        async def stream() -> None:
            nonlocal sent
            timeout = aiohttp.ClientTimeout(total=10)
            async with aiohttp.ClientSession(timeout=timeout) as http:
                i = 0
                while not stop_stream.is_set():
                    inst, occ = uid(), uid()
                    for state in ("STARTING", "PROCESSING", "COMPLETED"):
                        body = op_occ(instance=inst, op_occ_id=occ, state=state)
                        targets = list(alive)
                        if not targets:
                            await asyncio.sleep(0.05)
                            continue
                        sent += 1
                        try:
                            async with http.post(targets[i % len(targets)].url, json=body) as r:
                                if r.status == 204:
                                    acked.append(body)
                        except (TimeoutError, aiohttp.ClientError):
                            pass  # that replica died under us: not acknowledged
                        i += 1
                        await asyncio.sleep(0.005)

        try:
            for r in replicas:
                r.start()
                await r.ready()
                alive.append(r)
            senders = [asyncio.create_task(stream()) for _ in range(4)]
            for _ in range(ROUNDS):
                await asyncio.sleep(rng.uniform(0.5, 2.5))
                victim = rng.choice(replicas)
                alive.remove(victim)
                pid = victim.pid
                victim.stop()  # SIGKILL
                killed[pid] = (time.time(), float("inf"))
                victim.start()
                await victim.ready()
                alive.append(victim)
            stop_stream.set()
            async with asyncio.timeout(30):
                await asyncio.gather(*senders)
            async with asyncio.timeout(120):
                while True:
                    conn_rows = await _statuses(pg)
                    if conn_rows and all(s in TERMINAL for s in conn_rows):
                        break
                    await asyncio.sleep(0.3)
            stored = Counter(await _notification_ids(pg))
            statuses = Counter(await _statuses(pg))
            interrupted = await _count(
                pg, "SELECT COUNT(*) FROM jobs WHERE error_class='interrupted'"
            )
        finally:
            stop_stream.set()
            for r in replicas:
                r.stop()

    all_marks = marks(effects)
    acked_ids = {b["id"] for b in acked}
    doubles = double_runs(all_marks)
    overlapping = overlaps(all_marks, killed)
    print(
        f"\nchaos 3 replicas kill -9 (seed {SEED}): rounds={ROUNDS} sent={sent} "
        f"acked={len(acked)} stored={sum(stored.values())} statuses={dict(statuses)} "
        f"non-idempotent runs={sum(m.what == 'start' and m.step == 'apply' for m in all_marks)} "
        f"double runs={doubles} overlapping runs={overlapping}"
    )
    assert not acked_ids - set(stored), "an acknowledged notification was lost"
    assert max(stored.values()) == 1, "a notification was stored twice"
    assert set(statuses) <= set(TERMINAL)
    assert doubles == 0, "a non-idempotent step ran twice"
    assert overlapping == 0, "two replicas ran one instance at once"
    assert statuses["failed"] == interrupted  # only steps cut off by a kill fail
    assert len(acked) > ROUNDS * 10


async def _count(pg: str, sql: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(pg)
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


async def _statuses(pg: str) -> list[str]:
    import asyncpg

    conn = await asyncpg.connect(pg)
    try:
        return [r[0] for r in await conn.fetch("SELECT status FROM events")]
    finally:
        await conn.close()


async def _notification_ids(pg: str) -> list[str]:
    import asyncpg

    conn = await asyncpg.connect(pg)
    try:
        return [r[0] for r in await conn.fetch("SELECT notification_id FROM events")]
    finally:
        await conn.close()
