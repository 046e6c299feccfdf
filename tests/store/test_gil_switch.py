"""A process with a SQLite store hands the GIL over at least every millisecond, so the
writer thread is not kept waiting by a busy event loop; PostgreSQL leaves it alone."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from subscriber.config import DatabaseSettings
from subscriber.store.database import SQLITE_SWITCH_INTERVAL, Database, is_sqlite

CPYTHON_DEFAULT = 0.005


@pytest.fixture
def switch_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("switch_interval")
async def test_a_sqlite_store_shortens_the_switch_interval_and_postgresql_keeps_it(
    db_url: str,
) -> None:
    sys.setswitchinterval(CPYTHON_DEFAULT)
    db = Database(DatabaseSettings(url=db_url), read_threads=1)
    try:
        expected = SQLITE_SWITCH_INTERVAL if is_sqlite(db_url) else CPYTHON_DEFAULT
        assert sys.getswitchinterval() == pytest.approx(expected)
    finally:
        await db.dispose()


@pytest.mark.usefixtures("switch_interval")
async def test_an_interval_already_shorter_is_kept(tmp_path: Path) -> None:
    sys.setswitchinterval(SQLITE_SWITCH_INTERVAL / 4)
    db = Database(DatabaseSettings(url=f"sqlite+aiosqlite:///{tmp_path / 's.db'}"), read_threads=1)
    try:
        assert sys.getswitchinterval() == pytest.approx(SQLITE_SWITCH_INTERVAL / 4)
    finally:
        await db.dispose()
