"""Chaos, PostgreSQL: the store restarted mid-stream, then unreachable for 10 s.

A private PostgreSQL cluster (tests/testbed/private_postgres.py: the
machine's own is shared and is never restarted) is the store of one ``serve``
while notifications stream over HTTP. First the cluster is restarted
(``pg_ctl restart -m fast``) mid-stream; then it is stopped for 10 s and
started again. Meanwhile:

* while the store is down, every POST is answered 503 (with Retry-After),
  never 204, and ``/readyz`` says not ready, naming the store;
* ``serve`` stays up and, once the store is back, is ready again and takes
  notifications again;

and at the end every acknowledged (204) notification is stored exactly once,
every event is terminal, and the side-effect log shows no non-idempotent step
run twice (a step cut off by the outage fails its job as ``interrupted``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.backends import pg_dsn
from tests.chaos.harness import Replica, Stream, check_store, settle
from tests.fence_handler import handler_env
from tests.testbed.private_postgres import PrivatePostgres

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.asyncio]

OUTAGE = 10.0


async def test_store_restarted_and_down_10s_answers_503_reports_not_ready_and_resumes(
    tmp_path: Path,
) -> None:
    effects = tmp_path / "side_effects.txt"
    env = handler_env(effects, 0.05, lease_ttl=3)
    with PrivatePostgres() as pg:
        serve = Replica("a", tmp_path, pg.url, env)
        stream = Stream(lambda: [serve.url])
        try:
            serve.start()
            await serve.ready()
            stream.start()
            await asyncio.sleep(2)
            acked_before_restart = len(stream.acked)
            await asyncio.to_thread(pg.restart)
            await serve.wait_readiness(True, timeout=30)
            await asyncio.sleep(2)
            acked_after_restart = len(stream.acked) - acked_before_restart

            await asyncio.to_thread(pg.stop)
            down_at = time.time()
            body = await serve.wait_readiness(False, timeout=10)
            assert body["checks"]["store"]["ok"] is False
            await asyncio.sleep(max(0.0, OUTAGE - (time.time() - down_at)))
            up_at = time.time()
            await asyncio.to_thread(pg.start)
            await serve.wait_readiness(True, timeout=30)
            acked_at_recovery = len(stream.acked)
            await asyncio.sleep(2)
            await stream.stop()
            assert serve.alive(), "serve died during the outage"
            await settle(pg_dsn(pg.url))
            figures = await check_store(pg_dsn(pg.url), stream.sent, stream.acked, effects)
        finally:
            serve.stop()

    # While the cluster was down (a second's grace at each edge for requests in flight).
    during = [s for t, s in stream.answered if down_at + 1 < t < up_at]
    assert during and set(during) == {"503"}, f"answers while the store was down: {set(during)}"
    assert acked_before_restart > 0 and acked_after_restart > 0
    assert len(stream.acked) > acked_at_recovery, "nothing acknowledged after the outage"
    print(
        figures.line(
            "postgres restart + 10 s outage",
            answers=dict(stream.answers),
            answers_while_down=len(during),
        )
    )
