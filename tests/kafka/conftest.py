"""Fixtures of the kafka tier: a real Kafka-protocol broker (Tansu), stores, databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testbed import kafka_broker


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
