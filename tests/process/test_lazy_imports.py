"""A serve that uses no SSH, Tacker, OpenStack or Kafka, on SQLite, never loads their libraries.

Each of them costs megabytes of resident memory in every process of ``serve``
(asyncssh about 15, Alembic with Mako about 10, keystoneauth1 with requests about
7, cryptography about 7, asyncpg and aiokafka about 3 each); they are imported where
they are used.
That they still work when used is the business of the ``ssh``, ``tacker`` and
``kafka`` tiers and of the PostgreSQL tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import aiohttp

from subscriber.store.migrate import HEAD_REVISION
from tests import REPO
from tests.conftest import free_port
from tests.factories import op_occ

# Top-level names; a submodule counts as its package.
UNUSED = (
    "asyncssh",
    "alembic",
    "mako",
    "keystoneauth1",
    "requests",
    "openstack",
    "aiokafka",
    "asyncpg",
    "cryptography",
)


def _env() -> dict[str, str]:
    """The production defaults: no setting from this machine's environment or home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LCCN_")}
    return {**env, "PYTHONPATH": str(REPO), "LCCN_HOME": str(REPO / ".no-such-home")}


def _loaded(modules: set[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(UNUSED))


_SERVICE = """
import asyncio, json, sys
from subscriber.config import DatabaseSettings, HttpSettings, Settings
from subscriber.service import Service

async def main() -> None:
    settings = Settings(
        database=DatabaseSettings(url=sys.argv[1]), http=HttpSettings(host="127.0.0.1", port=0)
    )
    async with Service(settings):
        pass

asyncio.run(main())
print(json.dumps(sorted(sys.modules)))
"""


def test_a_service_started_and_stopped_loads_none_of_them(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"
    up = [sys.executable, "-m", "subscriber.cli", "db", "upgrade", "--database", url]
    subprocess.run(up, cwd=REPO, env=_env(), check=True, capture_output=True, timeout=60)
    out = subprocess.run(
        [sys.executable, "-c", _SERVICE, url],
        cwd=REPO,
        env=_env(),
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    modules = set(json.loads(out.stdout.splitlines()[-1]))
    assert "subscriber.service" in modules
    assert _loaded(modules) == []


async def test_serve_migrates_a_new_store_and_its_processes_load_none_of_them(
    tmp_path: Path,
) -> None:
    """``serve`` (ingest and its forked worker) on a new store, one notification handled:
    ``-X importtime`` names every module either process imports, on stderr (the
    ``db upgrade`` child that migrates the store runs without it)."""
    db, port, log = tmp_path / "lccn.db", free_port(), tmp_path / "serve.log"
    proc = _serve(db, port, log)
    try:
        async with asyncio.timeout(60), aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{port}"
            while True:
                assert proc.poll() is None, log.read_text()[-4000:]
                try:
                    async with http.get(f"{base}/readyz") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            body = op_occ(state="STARTING")
            async with http.post(f"{base}/lccn/notifications", json=body) as resp:
                assert resp.status == 204
            while _status(db, str(body["vnfLcmOpOccId"])) != "done":  # the worker ran its job
                await asyncio.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()[-4000:]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (HEAD_REVISION,)
        ]
    text = log.read_text()
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert {"subscriber.service", "subscriber.dispatcher"} <= modules, text[-4000:]
    assert _loaded(modules) == []


def _serve(db: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-X", "importtime", "-m", "subscriber.cli", "serve"]
    argv += ["--port", str(port), "--database", f"sqlite+aiosqlite:///{db}"]
    with log.open("wb") as out:
        return subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=out, stderr=out)


def _status(db: Path, op_occ_id: str) -> str | None:
    with sqlite3.connect(db, timeout=10) as conn:
        row = conn.execute(
            "SELECT status FROM events WHERE vnf_lcm_op_occ_id = ?", (op_occ_id,)
        ).fetchone()
    return None if row is None else str(row[0])
