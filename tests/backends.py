"""The store on both backends: a throw-away PostgreSQL database, a SQLite file."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

from subscriber.config import DatabaseSettings
from subscriber.store import Store

PG = "postgresql://postgres@127.0.0.1:5432"

# Parametrize a fixture with these to run a test on both backends.
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@asynccontextmanager
async def pg_database() -> AsyncIterator[str]:
    """A fresh, empty database on the machine's PostgreSQL; dropped afterwards. Yields its URL."""
    name = f"lccn_test_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(f"{PG}/postgres")
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


@asynccontextmanager
async def open_store(backend: str, tmp_path: Path) -> AsyncIterator[Store]:
    async with database_url(backend, tmp_path) as url, Store(DatabaseSettings(url=url)) as store:
        yield store
