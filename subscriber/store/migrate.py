"""Alembic migrations, run programmatically on an async engine."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

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


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Bring the store's schema up to ``revision`` (idempotent)."""

    def run(connection: Connection) -> None:
        command.upgrade(_config(connection), revision)

    async with engine.begin() as conn:
        await conn.run_sync(run)


async def current_revision(engine: AsyncEngine) -> str | None:
    def read(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(read)
