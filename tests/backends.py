"""The store on both backends: a throw-away PostgreSQL database, a SQLite file.

Fixtures (the root conftest offers ``pg_url``; ``tests/store/conftest.py`` puts
``db_url`` in place of the root's SQLite-only one, so there ``db_url``, ``store``
and ``start_service`` run each test on both backends):

* ``db_url``: a SQLite file, then a fresh PostgreSQL database (``postgres`` marker).
* ``pg_url``: a fresh PostgreSQL database alone, dropped afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

PG = "postgresql://postgres@127.0.0.1:5432"

# Parametrize a fixture with these to run a test on both backends.
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def pg_dsn(url: str) -> str:
    """An asyncpg DSN from a SQLAlchemy ``postgresql+asyncpg://`` URL."""
    return url.replace("postgresql+asyncpg://", "postgresql://")


@asynccontextmanager
async def pg_database() -> AsyncIterator[str]:
    """A fresh, empty database on the machine's PostgreSQL; dropped afterwards. Yields its URL."""
    name = f"lccn_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = await asyncpg.connect(f"{PG}/postgres")
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"PostgreSQL at 127.0.0.1:5432 is needed: {exc}")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    finally:
        admin = await asyncpg.connect(f"{PG}/postgres")
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@asynccontextmanager
async def database_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"
        return
    async with pg_database() as url:
        yield url


@pytest.fixture(params=BACKENDS)
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with database_url(request.param, tmp_path) as url:
        yield url


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with pg_database() as url:
        yield url
