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
import os
import random
import time
from pathlib import Path

import pytest

from tests.backends import pg_database, pg_dsn
from tests.chaos.harness import Replica, Stream, check_store, settle
from tests.fence_handler import handler_env, marks, overlaps

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.asyncio]

ROUNDS = int(os.environ.get("LCCN_CHAOS_ROUNDS", "10"))
SEED = int(os.environ.get("LCCN_CHAOS_SEED", str(random.randrange(1 << 30))))


async def test_three_replicas_one_killed_each_round_lose_nothing_and_never_run_twice(
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    effects = tmp_path / "side_effects.txt"
    env = handler_env(effects, 0.05, lease_ttl=3)
    killed: dict[int, tuple[float, float]] = {}  # pid -> (killed at, forever)
    async with pg_database() as url:
        pg = pg_dsn(url)
        replicas = [Replica(n, tmp_path, url, env) for n in ("a", "b", "c")]
        alive: list[Replica] = []
        # Round robin over the replicas alive, as behind a load balancer; a
        # replica killed under a request leaves it unacknowledged. Paced near what the
        # three work off, so the backlog left at the end stays short.
        stream = Stream(lambda: [r.url for r in alive], pause=0.05)
        try:
            for r in replicas:
                r.start()
                await r.ready()
                alive.append(r)
            stream.start()
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
            await stream.stop()
            await settle(pg)
            figures = await check_store(pg, stream.sent, stream.acked, effects)
        finally:
            for r in replicas:
                r.stop()

    overlapping = overlaps(marks(effects), killed)
    print(
        figures.line(
            f"3 replicas kill -9 (seed {SEED})", rounds=ROUNDS, overlapping_runs=overlapping
        )
    )
    assert overlapping == 0, "two replicas ran one instance at once"
    assert figures.acked > ROUNDS * 10
