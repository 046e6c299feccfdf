"""What the benches share: the machine line, and ``--database`` (a scratch store per side).

Not a bench itself. ``python bench/NAME.py`` puts this directory on ``sys.path``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/NAME.py` from a checkout
    sys.path.insert(0, str(ROOT))

__all__ = [
    "ROOT",
    "add_database_argument",
    "backend_name",
    "durability",
    "machine",
    "scratch_database",
]


def machine() -> str:
    """CPUs and load, so a reader can judge the figures."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    python = sys.version.split()[0]
    return f"CPUs: {os.cpu_count()} (load average at start: {load}); Python {python}"


def add_database_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database",
        default="",
        metavar="URL",
        help="PostgreSQL server to measure on, e.g. postgresql+asyncpg://postgres@127.0.0.1:5432 "
        "(a fresh database is created on it per measured side and dropped after); "
        "default: a SQLite file in a temporary directory",
    )


def backend_name(url: str) -> str:
    return "SQLite" if not url or make_url(url).get_backend_name() == "sqlite" else "PostgreSQL"


async def durability(url: str, sqlite_synchronous: str = "FULL") -> str:
    """How durable a commit is on this backend, in words (asks a PostgreSQL server)."""
    if backend_name(url) == "SQLite":
        return f"SQLite WAL, synchronous={sqlite_synchronous} (FULL: fsync of the WAL per commit)"
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    conn = await asyncpg.connect(_admin_dsn(url))
    try:
        values = [
            f"{name}={await conn.fetchval(f'SHOW {name}')}"
            for name in ("fsync", "synchronous_commit", "wal_sync_method")
        ]
        version = await conn.fetchval("SHOW server_version")
    finally:
        await conn.close()
    return f"PostgreSQL {version} on this machine, {', '.join(values)}"


def _admin_dsn(server: str) -> str:
    url = make_url(server)
    return url.set(drivername="postgresql", database=url.database or "postgres").render_as_string(
        hide_password=False
    )


@contextlib.asynccontextmanager
async def scratch_database(server: str, workdir: Path, name: str) -> AsyncIterator[str]:
    """A fresh, empty database; yields its SQLAlchemy async URL.

    Arguments:
        server: ``""`` for a SQLite file in ``workdir``, else a PostgreSQL URL
            (its database part, if any, is only used to connect as admin).
        name: tells the scratch databases of one run apart.
    """
    if backend_name(server) == "SQLite":
        yield f"sqlite+aiosqlite:///{workdir / f'{name}.db'}"
        return
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    url = make_url(server)
    dbname = f"lccn_bench_{name}_{uuid.uuid4().hex[:8]}"
    admin_dsn = _admin_dsn(server)
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{dbname}"')
    finally:
        await admin.close()
    try:
        yield url.set(drivername="postgresql+asyncpg", database=dbname).render_as_string(
            hide_password=False
        )
    finally:
        admin = await asyncpg.connect(admin_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        finally:
            await admin.close()
