"""Several processes opening one new SQLite store at once never see "database is locked".

SQLite answers ``PRAGMA journal_mode=WAL`` with SQLITE_BUSY at once (no busy handler)
while another process converts the new file or, closing it last, cleans up its WAL.
Without the retry in ``database._enter_wal`` about 1 first open in 100 failed here.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path

from subscriber.config import DatabaseSettings
from subscriber.store.database import Database

_ROUNDS = 150
_PROCESSES = 4


def _open_read_close(path: str) -> str:
    async def once() -> None:
        db = Database(DatabaseSettings(url=f"sqlite+aiosqlite:///{path}"), read_threads=1)
        try:
            await db.read(lambda conn: conn.exec_driver_sql("SELECT 1").scalar())
            await db.write_batch(
                [lambda conn: conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (x)")]
            )
        finally:
            await db.dispose()

    try:
        asyncio.run(once())
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return ""


def test_processes_opening_a_new_store_together_all_succeed(tmp_path: Path) -> None:
    failures: list[str] = []
    with multiprocessing.get_context("fork").Pool(_PROCESSES) as pool:
        for n in range(_ROUNDS):
            path = str(tmp_path / f"new-{n}.db")
            failures += [f for f in pool.map(_open_read_close, [path] * _PROCESSES) if f]
    assert failures == []
