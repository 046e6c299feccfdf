"""Replicas starting together on one new store: the first migrates, the others wait for it.

Each migrates in its own process (``db upgrade``, as ``serve`` does before it starts):
Alembic keeps per-process global state, so the race is between processes.
"""

from __future__ import annotations

import asyncio
import sys

from subscriber.config import DatabaseSettings
from subscriber.store.database import Database
from subscriber.store.migrate import HEAD_REVISION, current_revision
from tests import REPO
from tests.programs import program_env


async def _db_upgrade(url: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "subscriber.cli", "db", "upgrade", "--database", url),
        cwd=REPO,
        env=program_env(),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    return proc.returncode or 0, err.decode(errors="replace")


async def test_concurrent_first_migrations_of_one_store_all_succeed(db_url: str) -> None:
    results = await asyncio.gather(*(_db_upgrade(db_url) for _ in range(4)))
    assert [err for code, err in results if code != 0] == []
    db = Database(DatabaseSettings(url=db_url))
    try:
        assert await current_revision(db) == HEAD_REVISION
    finally:
        await db.dispose()
