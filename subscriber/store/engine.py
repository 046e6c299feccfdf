"""Engines for the store: SQLite (embedded default, WAL) or PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from subscriber.config import DatabaseSettings

__all__ = ["create_engines", "is_sqlite"]


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _sqlite_file(url: str) -> Path | None:
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def create_engines(settings: DatabaseSettings) -> tuple[AsyncEngine, AsyncEngine]:
    """Return ``(write_engine, read_engine)``.

    SQLite allows one writer at a time, so writes get their own engine whose
    transactions start with ``BEGIN IMMEDIATE`` (no lock-upgrade deadlocks
    between processes), and reads get a second engine with plain deferred
    transactions that never wait on the writer (WAL). PostgreSQL uses one
    engine for both.
    """
    url = settings.resolved_url()
    if not is_sqlite(url):
        engine = create_async_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)
        return engine, engine

    path = _sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    busy_ms = int(settings.busy_timeout * 1000)
    synchronous = settings.sqlite_synchronous

    def make(immediate: bool, pool_size: int) -> AsyncEngine:
        engine = create_async_engine(
            url,
            pool_size=pool_size,
            max_overflow=0,
            connect_args={"timeout": settings.busy_timeout},
        )

        @sa.event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Take transaction control from the driver so "begin" below decides.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={synchronous}")
            cur.execute(f"PRAGMA busy_timeout={busy_ms}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @sa.event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine

    return make(immediate=True, pool_size=2), make(immediate=False, pool_size=4)
