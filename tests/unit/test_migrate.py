"""The schema revision read without Alembic, and the head constant kept in step with it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from subscriber.config import DatabaseSettings
from subscriber.store.database import Database
from subscriber.store.migrate import (
    HEAD_REVISION,
    SCRIPT_LOCATION,
    MigrationError,
    current_revision,
    upgrade,
)


def test_head_revision_is_alembics_head() -> None:
    """A new migration must bump HEAD_REVISION, or a current store would look behind
    (and one left behind would look current)."""
    assert ScriptDirectory(SCRIPT_LOCATION).get_current_head() == HEAD_REVISION


async def test_revision_of_an_empty_a_migrated_and_a_foreign_store(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    db = Database(DatabaseSettings(url=f"sqlite+aiosqlite:///{path}"))
    try:
        assert await current_revision(db) is None
        await upgrade(db)
        assert await current_revision(db) == HEAD_REVISION
        await upgrade(db)  # at the head: nothing to do
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE alembic_version SET version_num = '9999_later'")
        assert await current_revision(db) == "9999_later"
        with pytest.raises(MigrationError, match="9999_later") as info:
            await upgrade(db)
        assert info.value.too_new
    finally:
        await db.dispose()
