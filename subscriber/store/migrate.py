"""Alembic migrations, run programmatically through the store's Database."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from subscriber.store.database import Database

__all__ = ["current_revision", "head_revision", "upgrade"]

_SCRIPT_LOCATION = str(Path(__file__).resolve().parent.parent / "migrations")


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", _SCRIPT_LOCATION)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()


async def upgrade(db: Database, revision: str = "head") -> None:
    """Bring the store's schema up to ``revision`` (idempotent)."""

    def run(connection: Connection) -> None:
        command.upgrade(_config(connection), revision)

    await db.write_batch([run])


async def current_revision(db: Database) -> str | None:
    def read(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    return await db.read(read)
