"""``serve --role all``'s worker: woken without polling, watched, restarted; the roles alone.

The rescan interval is set to a minute in these tests, so an event that is
run within seconds was reached by a wake-up (the socket from the ingest
process, or PostgreSQL NOTIFY between separate roles), not by the poll.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from tests import REPO
from tests.backends import pg_dsn
from tests.conftest import free_port
from tests.factories import op_occ
from tests.programs import alive, children, gone, worker_pid

pytestmark = pytest.mark.asyncio


NO_POLL = {"LCCN_DISPATCH__RESCAN_INTERVAL": "60", "LCCN_DISPATCH__REORDER_WINDOW": "0.05"}


class Serve:
    def __init__(self, tmp: Path, database: str, *args: str, env: dict[str, str]) -> None:
        self.port = free_port()
        self.log = tmp / f"serve-{self.port}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "subscriber.cli", "serve", "--log-format", "text"),
                    *("--port", str(self.port), "--database", database, *args),
                ],
                cwd=REPO,
                env={**os.environ, **env, "PYTHONPATH": str(REPO)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def readyz(self, http: aiohttp.ClientSession) -> tuple[int, dict[str, object]]:
        async with http.get(f"{self.base}/readyz") as resp:
            return resp.status, await resp.json()

    async def ready(self, within: float = 60) -> None:
        async with asyncio.timeout(within), aiohttp.ClientSession() as http:
            while True:
                assert self.proc.poll() is None, self.log.read_text()
                try:
                    if (await self.readyz(http))[0] == 200:
                        return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def serve(tmp_path: Path, db_url: str) -> Iterator[Serve]:
    proc = Serve(tmp_path, db_url, "--role", "all", env=NO_POLL)
    yield proc
    proc.stop()


def _status(db: Path, op_occ_id: str) -> str | None:
    with sqlite3.connect(db, timeout=10) as conn:
        row = conn.execute(
            "SELECT status FROM events WHERE vnf_lcm_op_occ_id = ?", (op_occ_id,)
        ).fetchone()
    return None if row is None else str(row[0])


async def _post(http: aiohttp.ClientSession, url: str) -> str:
    body = op_occ(state="STARTING")
    async with http.post(url, json=body) as resp:
        assert resp.status == 204
    return str(body["vnfLcmOpOccId"])


async def test_serve_runs_jobs_in_its_worker_woken_without_polling(
    serve: Serve, tmp_path: Path
) -> None:
    await serve.ready()
    worker = await worker_pid(serve.proc.pid)
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
                while _status(tmp_path / "lccn.db", occ) != "done":
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
    log = serve.log.read_text()
    assert "worker started" in log and 'role="worker"' in log


async def test_a_worker_that_dies_is_restarted_and_readyz_says_so_meanwhile(
    serve: Serve, tmp_path: Path
) -> None:
    await serve.ready()
    first = await worker_pid(serve.proc.pid)
    os.kill(first, signal.SIGKILL)
    async with aiohttp.ClientSession() as http:
        async with asyncio.timeout(10):
            while (await serve.readyz(http))[0] != 503:
                await asyncio.sleep(0.02)
        _, body = await serve.readyz(http)
        assert body["checks"]["worker"]["ok"] is False  # type: ignore[index]
        await serve.ready()
        second = await worker_pid(serve.proc.pid)
        assert second != first and serve.proc.poll() is None
        occ = await _post(http, f"{serve.base}/lccn/notifications")
        async with asyncio.timeout(10):
            while _status(tmp_path / "lccn.db", occ) != "done":
                await asyncio.sleep(0.02)
    assert "worker started" in serve.log.read_text()


async def test_sigterm_stops_the_worker_too(serve: Serve) -> None:
    await serve.ready()
    worker = await worker_pid(serve.proc.pid)
    serve.proc.send_signal(signal.SIGTERM)
    assert serve.proc.wait(30) == 0
    await gone({worker})
    assert not alive(worker)


@pytest.mark.postgres
async def test_separate_roles_on_postgresql_are_woken_by_notify(
    tmp_path: Path, pg_url: str
) -> None:
    ingest = Serve(tmp_path, pg_url, "--role", "ingest", env=NO_POLL)
    worker: Serve | None = None
    try:
        await ingest.ready()  # migrates the store
        worker = Serve(tmp_path, pg_url, "--role", "worker", env=NO_POLL)
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
