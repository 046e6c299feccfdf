"""Two ``serve`` replicas on one PostgreSQL: a replica paused past its lease writes nothing.

Replica A is stopped (SIGSTOP) while it runs a non-idempotent step, longer
than its lease; replica B takes A's lanes over and settles every event; then A
is continued (SIGCONT). The store must not change after that (A's writes are
fenced), A must start no step, and the side-effect log of the test handler
(tests/fence_handler.py) must show no non-idempotent step run twice and no two
runs of one instance at once.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from tests.backends import pg_dsn
from tests.chaos.harness import TERMINAL, Replica, pg_rows
from tests.factories import op_occ, uid
from tests.fence_handler import double_runs, marks, overlaps

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.asyncio]

LEASE_TTL = 1.5


async def _dump(pg: str) -> dict[str, list[tuple[object, ...]]]:
    return {
        t: await pg_rows(pg, f"SELECT * FROM {t} ORDER BY id") for t in ("events", "jobs", "steps")
    }


async def _a_inside_apply(effects: Path, a: Replica, pg: str, sent: int) -> bool:
    """Wait until A runs a non-idempotent step (True) or every event is settled (False)."""
    async with asyncio.timeout(60):
        while True:
            mine = [m for m in marks(effects) if m.pid == a.pid and m.step == "apply"]
            open_runs = {m.job_id for m in mine if m.what == "start"} - {
                m.job_id for m in mine if m.what == "end"
            }
            if open_runs:
                return True
            rows = await pg_rows(pg, "SELECT status FROM events")
            if len(rows) == sent and all(r[0] in TERMINAL for r in rows):
                return False
            await asyncio.sleep(0.02)


async def test_a_replica_paused_past_its_lease_writes_nothing_when_it_wakes(
    tmp_path: Path, pg_url: str
) -> None:
    effects = tmp_path / "side_effects.txt"
    effects.touch()
    env = {
        "LCCN_HANDLERS__MODULES": json.dumps(["tests.fence_handler"]),
        "LCCN_TEST_SIDE_EFFECTS": str(effects),
        "LCCN_TEST_STEP_SECONDS": "0.5",
        "LCCN_DISPATCH__LEASE_TTL": str(LEASE_TTL),
        "LCCN_DISPATCH__RESCAN_INTERVAL": "0.3",
        "LCCN_DISPATCH__REORDER_WINDOW": "0.05",
    }
    pg = pg_dsn(pg_url)
    a, b = Replica("a", tmp_path, pg_url, env), Replica("b", tmp_path, pg_url, env)
    try:
        a.start()
        await a.ready()  # A migrates the store first; then B joins
        b.start()
        await b.ready()
        # Both workers dispatching: a worker still starting (slow on a loaded machine)
        # would leave every lane to the other replica, and A nothing to be paused in.
        await a.wait_readiness(True)
        await b.wait_readiness(True)
        bodies: list[dict[str, object]] = []
        acked = 0
        # Stop A while it is inside a non-idempotent step. Which replica takes a lane
        # is a race; should B win every lane of a round, send another round.
        for _ in range(5):
            batch = [
                op_occ(instance=inst, state=state, op_occ_id=occ)
                for inst in [uid() for _ in range(10)]
                for occ in [uid()]
                for state in ("STARTING", "PROCESSING", "COMPLETED")
            ]
            async with aiohttp.ClientSession() as http:
                for i, body in enumerate(batch):  # round robin, as behind a load balancer
                    async with http.post((a, b)[i % 2].url, json=body) as resp:
                        assert resp.status == 204
                        acked += 1
            bodies += batch
            if await _a_inside_apply(effects, a, pg, len(bodies)):
                break
        else:
            pytest.fail("replica A never ran a step in five rounds:\n" + a.log_text()[-3000:])
        a.signal_all(signal.SIGSTOP)
        stopped = time.time()

        # B takes A's lanes over once their leases expire and settles everything.
        async with asyncio.timeout(90):
            while True:
                rows = await pg_rows(pg, "SELECT status FROM events")
                if len(rows) == len(bodies) and all(r[0] in TERMINAL for r in rows):
                    break
                await asyncio.sleep(0.2)
        assert time.time() - stopped > LEASE_TTL
        before = await _dump(pg)
        lease_tokens = await pg_rows(pg, "SELECT MAX(token) FROM leases")

        a.signal_all(signal.SIGCONT)
        continued = time.time()
        await asyncio.sleep(3 * LEASE_TTL)  # renewals, rescans, lanes retried
        assert a.proc.poll() is None, "replica A died"
        assert await _dump(pg) == before, "a replica that lost its lease wrote to the store"

        all_marks = marks(effects)
        after_wake = [m for m in all_marks if m.pid == a.pid and m.what == "start"]
        after_wake = [m for m in after_wake if m.at >= continued]
        assert after_wake == [], "the paused replica started a step after waking"
        assert double_runs(all_marks) == 0
        assert overlaps(all_marks, {a.pid: (stopped, continued)}) == 0
        # The run A was cut off in is failed as interrupted by B, not run again.
        statuses = [r[0] for r in await pg_rows(pg, "SELECT status FROM events")]
        interrupted = await pg_rows(pg, "SELECT COUNT(*) FROM jobs WHERE error_class='interrupted'")
        assert statuses.count("failed") == interrupted[0][0] >= 1
        assert "lost the lease of a running lane" in a.log_text()
        # Figures for the report.
        print(
            f"\nchaos SIGSTOP fencing: events sent={len(bodies)} acked={acked} "
            f"stored={len(before['events'])} "
            f"done={statuses.count('done')} failed(interrupted)={statuses.count('failed')} "
            f"step runs={sum(m.what == 'start' for m in all_marks)} "
            f"double runs={double_runs(all_marks)} max token={lease_tokens[0][0]} "
            f"A starts after SIGCONT=0 store rows changed after SIGCONT=0"
        )
    finally:
        a.stop()
        b.stop()
