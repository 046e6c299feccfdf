"""``serve --role all``'s worker: woken without polling, watched, restarted; the roles alone.

The rescan interval is set to a minute in these tests, so an event that is
run within seconds was reached by a wake-up (the socket from the ingest
process, or PostgreSQL NOTIFY between separate roles), not by the poll.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from tests.backends import pg_dsn
from tests.conftest import metric
from tests.factories import op_occ
from tests.programs import ServeProcess, alive, children, gone, worker_pid

pytestmark = pytest.mark.asyncio


NO_POLL = {"LCCN_DISPATCH__RESCAN_INTERVAL": "60", "LCCN_DISPATCH__REORDER_WINDOW": "0.05"}


def serve_process(tmp_path: Path, database: str, role: str) -> ServeProcess:
    args = ("--log-format", "text", "--role", role)
    return ServeProcess(tmp_path, env=NO_POLL, database=database, args=args).start()


@pytest.fixture
def serve(tmp_path: Path, db_url: str) -> Iterator[ServeProcess]:
    proc = serve_process(tmp_path, db_url, "all")
    yield proc
    proc.stop()


@pytest.fixture
async def worker(serve: ServeProcess) -> int:
    """The pid of ``serve``'s worker, once serve is ready."""
    await serve.ready()
    return await worker_pid(serve.proc.pid)  # type: ignore[union-attr]


async def _post(http: aiohttp.ClientSession, url: str) -> str:
    body = op_occ(state="STARTING")
    async with http.post(url, json=body) as resp:
        assert resp.status == 204
    return str(body["vnfLcmOpOccId"])


async def _metrics(http: aiohttp.ClientSession, serve: ServeProcess) -> str:
    async with http.get(f"{serve.base}/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


async def test_serve_runs_jobs_in_its_worker_woken_without_polling(
    serve: ServeProcess, worker: int
) -> None:
    async with aiohttp.ClientSession() as http:
        status, body = await serve.readyz(http)
        assert status == 200 and body["checks"]["worker"] == {  # type: ignore[index]
            "ok": True,
            "detail": f"pid {worker}",
        }
        url = f"{serve.base}/lccn/notifications"
        for _ in range(3):
            occ = await _post(http, url)
            async with asyncio.timeout(10):  # the rescan would take 60 s
                while serve.status(occ) != "done":
                    await asyncio.sleep(0.02)
        async with asyncio.timeout(10):  # the outcome is counted just after the status
            while True:
                async with http.get(f"{serve.base}/metrics") as resp:
                    metrics = await resp.text()
                if 'lccn_jobs_total{mode="live",outcome="done"} 3.0' in metrics:
                    break
                await asyncio.sleep(0.05)
    # Received by the ingest process, run by the worker: one exposition of both.
    assert 'lccn_events_received_total{source="http",state="STARTING"' in metrics
    assert 'lccn_jobs_total{mode="live",outcome="done"} 3.0' in metrics
    assert metrics.count("# TYPE lccn_jobs_total counter") == 1
    assert metrics.count("# TYPE lccn_ready gauge") == 1  # the ingest process's own
    log = serve.log.read_text()
    assert "worker started" in log and 'role="worker"' in log


async def test_a_worker_that_dies_is_restarted_and_readyz_says_so_meanwhile(
    serve: ServeProcess, worker: int
) -> None:
    first = worker
    async with aiohttp.ClientSession() as http:
        text = await _metrics(http, serve)
        assert metric(text, "lccn_worker_up") == 1
        assert metric(text, "lccn_worker_exits_total") == 0
        assert metric(text, 'lccn_ready{check="worker"}') == 1
        os.kill(first, signal.SIGKILL)

        # While it is down (0.5 s of restart backoff, then its start) /readyz says so, and
        # so do the gauges the alerts read: both watched at once, since the window is short.
        async def gauges_down() -> str:
            while metric(text := await _metrics(http, serve), "lccn_worker_up") != 0:
                await asyncio.sleep(0.02)
            return text

        async with asyncio.timeout(10):
            body, text = await asyncio.gather(serve.wait_readiness(False), gauges_down())
        assert body["checks"]["worker"]["ok"] is False  # type: ignore[index]
        assert metric(text, "lccn_worker_exits_total") == 1
    await serve.ready()
    async with aiohttp.ClientSession() as http:
        text = await _metrics(http, serve)
        assert metric(text, "lccn_worker_up") == 1
        assert metric(text, "lccn_worker_exits_total") == 1
        assert metric(text, 'lccn_ready{check="worker"}') == 1
        second = await worker_pid(serve.proc.pid)
        assert second != first and serve.proc.poll() is None
        occ = await _post(http, f"{serve.base}/lccn/notifications")
        async with asyncio.timeout(10):
            while serve.status(occ) != "done":
                await asyncio.sleep(0.02)
    assert "worker started" in serve.log.read_text()


async def test_sigterm_stops_the_worker_too(serve: ServeProcess, worker: int) -> None:
    serve.proc.send_signal(signal.SIGTERM)
    assert serve.proc.wait(30) == 0
    await gone({worker})
    assert not alive(worker)


@pytest.mark.postgres
async def test_separate_roles_on_postgresql_are_woken_by_notify(
    tmp_path: Path, pg_url: str
) -> None:
    ingest = serve_process(tmp_path, pg_url, "ingest")
    worker: ServeProcess | None = None
    try:
        await ingest.ready()  # migrates the store
        worker = serve_process(tmp_path, pg_url, "worker")
        await worker.ready()  # its own /readyz on its own port
        assert children(ingest.proc.pid) == []  # --role ingest starts no worker of its own
        async with aiohttp.ClientSession() as http:
            occ = await _post(http, f"{ingest.base}/lccn/notifications")
            pg = pg_dsn(pg_url)
            conn = await asyncpg.connect(pg)
            try:
                async with asyncio.timeout(10):  # the rescan would take 60 s
                    while (
                        await conn.fetchval(
                            "SELECT status FROM events WHERE vnf_lcm_op_occ_id = $1", occ
                        )
                        != "done"
                    ):
                        await asyncio.sleep(0.05)
            finally:
                await conn.close()
            # The job's outcome is counted just after its status is written.
            async with asyncio.timeout(10):
                while True:
                    async with http.get(f"{worker.base}/metrics") as resp:
                        if 'lccn_jobs_total{mode="live",outcome="done"} 1.0' in await resp.text():
                            break
                    await asyncio.sleep(0.05)
            async with http.post(f"{worker.base}/lccn/notifications", json=op_occ()) as resp:
                assert resp.status == 404  # a worker alone takes no notifications
    finally:
        ingest.stop()
        if worker is not None:
            worker.stop()
    assert ingest.proc.returncode == 0 and worker is not None and worker.proc.returncode == 0
