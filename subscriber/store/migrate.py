"""The store's schema revision, and Alembic migrations run through the store's Database.

The revision is read with plain SQL, and Alembic (with Mako and Pygments, about
10 MB resident) is imported only when the schema is behind :data:`HEAD_REVISION`
and :func:`upgrade` has to migrate it: a service started on a current store
never loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from subscriber.store.database import Database

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["HEAD_REVISION", "SCRIPT_LOCATION", "MigrationError", "current_revision", "upgrade"]

# The newest migration in subscriber/migrations/versions. Bump it with every new one:
# tests/unit/test_migrate.py fails while it differs from Alembic's head.
HEAD_REVISION = "0007"

SCRIPT_LOCATION = str(Path(__file__).resolve().parent.parent / "migrations")

# pg_advisory_xact_lock key of schema migrations (any constant all our versions share).
_MIGRATION_LOCK = 0x6C63636E  # "lccn"


class MigrationError(Exception):
    """Alembic refused to migrate (its ``CommandError``, chained); ``too_new``: the store's
    revision is none of ours, so a newer lccn-subscriber migrated it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.too_new = "Can't locate revision" in message


def _config(connection: Connection) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    cfg.attributes["connection"] = connection
    return cfg


def _read_revision(connection: Connection) -> str | None:
    # What Alembic's MigrationContext.get_current_revision reads, without Alembic.
    if not sa.inspect(connection).has_table("alembic_version"):
        return None
    rows = connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
    # Several rows (branches) are never ours: shown as they are, and never the head.
    return ",".join(sorted(rows)) or None


async def current_revision(db: Database) -> str | None:
    """The store's schema revision; ``None`` when it has none yet (an empty database).

    Raises:
        SQLAlchemyError, OSError: the database cannot be reached.
    """
    return await db.read(_read_revision)


async def upgrade(db: Database) -> None:
    """Bring the store's schema up to :data:`HEAD_REVISION` (idempotent; Alembic is only
    imported when the schema is behind).

    Raises:
        MigrationError: Alembic refused (``too_new``: a newer lccn-subscriber migrated it).
        SQLAlchemyError, OSError: the database cannot be reached.
    """
    if await current_revision(db) == HEAD_REVISION:
        return
    from alembic import command
    from alembic.util.exc import CommandError

    def run(connection: Connection) -> None:
        if connection.dialect.name == "postgresql":
            # Replicas started together on a new store: one migrates, the others wait
            # here, then find the schema at the head (Alembic reads it after the lock).
            # SQLite's write transaction already holds the file's only write lock.
            connection.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
        command.upgrade(_config(connection), "head")

    try:
        await db.write_batch([run])
    except CommandError as exc:
        raise MigrationError(str(exc)) from exc
