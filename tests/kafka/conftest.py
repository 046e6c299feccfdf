"""Fixtures of the kafka tier: a real Kafka-protocol broker (Tansu), stores, databases."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from subscriber.config import DatabaseSettings
from subscriber.store import Store
from tests.kafka.helpers import uid
from tests.testbed import kafka_broker


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.kafka)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kafka_broker.Broker]:
    """One broker for the session; tests isolate themselves with unique topics and groups."""
    try:
        kafka_broker.tansu_binary()
    except FileNotFoundError as exc:
        pytest.fail(str(exc))
    log = tmp_path_factory.mktemp("kafka") / "tansu.log"
    running = kafka_broker.start_broker(log=log)
    yield running
    running.stop()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[kafka_broker.Broker]:
    """A broker of this test alone (for tests that stop and start it)."""
    running = kafka_broker.start_broker(log=tmp_path / "tansu.log")
    yield running
    running.stop()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"


@pytest.fixture
async def store(sqlite_url: str) -> AsyncIterator[Store]:
    async with Store(DatabaseSettings(url=sqlite_url)) as running:
        yield running


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A fresh database on the machine's PostgreSQL, dropped afterwards."""
    import asyncpg  # type: ignore[import-untyped]

    name = uid("lccn_kafka").replace("-", "_")
    try:
        admin = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/postgres")
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"PostgreSQL at 127.0.0.1:5432 is needed: {exc}")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
