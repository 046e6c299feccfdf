"""Chaos, Tacker: Tacker unreachable while the write-back PATCH of INSTANTIATE is sent.

INSTANTIATE op-occs (STARTING, PROCESSING, COMPLETED) stream over HTTP into
one ``serve`` (PostgreSQL store); each COMPLETED runs the write-back step
(tests/chaos/writeback_handler.py: the product's ``TackerClient.write_back``
behind the cluster handlers' "already there?" check) against a Tacker on
loopback (tests/chaos/flaky_tacker.py). A PATCH in the middle of the stream
starts an outage: that PATCH and every request for the next few seconds are
dropped (connection aborted, no answer), then the port refuses connections
for a few seconds more, then Tacker answers again. Then:

* the step failed transiently and was retried (the job's attempts show it),
  and every write-back job ended done;
* Tacker applied exactly one PATCH per instance (none twice, none missing);
* every acknowledged notification is stored once, every event is terminal.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from tests.backends import pg_database, pg_dsn
from tests.chaos.flaky_tacker import FlakyTacker
from tests.chaos.harness import Replica, Stream, check_store, pg_rows, settle
from tests.fence_handler import handler_env, marks

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.asyncio]

DROP_SECONDS = 4.0
REFUSE_SECONDS = 4.0


async def test_write_back_retried_through_a_tacker_outage_patches_each_instance_once(
    tmp_path: Path,
) -> None:
    effects = tmp_path / "side_effects.txt"
    tacker = FlakyTacker()
    await tacker.start()
    env = {
        **handler_env(
            effects,
            0,
            "tests.chaos.writeback_handler",
            lease_ttl=10,
            backoff_initial=0.5,
            backoff_max=2,
            max_attempts=40,
        ),
        "LCCN_TACKER__ENDPOINT": tacker.url,
        "LCCN_TACKER__AUTH_TYPE": "noauth",
        "LCCN_TACKER__RETRY_ATTEMPTS": "3",
        "LCCN_TACKER__RETRY_INITIAL": "0.2",
        "LCCN_TACKER__RETRY_MAX": "0.5",
        "LCCN_TACKER__REQUEST_TIMEOUT": "5",
        "LCCN_TACKER__OP_POLL_INTERVAL": "0.1",
    }
    tacker.trip_after(20)
    try:
        async with pg_database() as url:
            pg = pg_dsn(url)
            serve = Replica("a", tmp_path, url, env)
            stream = Stream(lambda: [serve.url], senders=2, pause=0.03)
            try:
                serve.start()
                await serve.ready()
                stream.start()
                async with asyncio.timeout(60):
                    await tacker.tripped.wait()
                await asyncio.sleep(DROP_SECONDS)
                await tacker.refuse()
                await asyncio.sleep(REFUSE_SECONDS)
                await tacker.restore()
                await asyncio.sleep(2)
                await stream.stop()
                await settle(pg)
                figures = await check_store(pg, stream.sent, stream.acked, effects)
                jobs = await pg_rows(
                    pg,
                    "SELECT j.status, j.attempts FROM jobs j WHERE j.handler = 'chaos-write-back'",
                )
            finally:
                serve.stop()
    finally:
        await tacker.close()

    completed = {b["vnfInstanceId"] for b in stream.acked if b["operationState"] == "COMPLETED"}
    double_patches = sum(n - 1 for n in tacker.applied.values() if n > 1)
    retried = sum(1 for _, attempts in jobs if attempts > 0)
    runs = Counter(m.job_id for m in marks(effects) if m.what == "start")
    # The side effect of this scenario is Tacker's: the PATCHes it applied.
    figures = replace(
        figures, side_effects=sum(tacker.applied.values()), double_runs=double_patches
    )
    print(
        figures.line(
            "tacker unreachable during write-back",
            write_backs=len(jobs),
            jobs_retried=retried,
            step_runs=sum(runs.values()),
            dropped=dict(tacker.dropped),
        )
    )
    assert tacker.dropped["PATCH"] >= 1, "the outage did not hit a PATCH"
    assert {s for s, _ in jobs} == {"done"}, Counter(s for s, _ in jobs)
    assert retried >= 1, "no write-back was retried through the outage"
    assert double_patches == 0, "an instance was PATCHed twice"
    assert completed <= set(tacker.applied), "an acknowledged COMPLETED was never written back"
    assert len(jobs) == len(completed)
