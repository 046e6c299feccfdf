"""The kafka tier's own fixtures: a broker of one test alone (the session's is shared),
and one that keeps its topics, records and offsets across a restart, as Kafka does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kafka.helpers import DurableBroker
from tests.testbed import kafka_broker
from tests.testbed.s3_store import start_s3


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[kafka_broker.Broker]:
    """A broker of this test alone (for tests that stop and start it)."""
    running = kafka_broker.start_broker(log=tmp_path / "tansu.log")
    yield running
    running.stop()


@pytest.fixture
def durable_broker(tmp_path: Path) -> Iterator[DurableBroker]:
    store = start_s3(log=tmp_path / "s3.log")
    try:
        log = tmp_path / "tansu.log"
        running = kafka_broker.start_broker(log=log, storage=store.tansu_url, env=store.client_env)
        durable = DurableBroker(running, store.tansu_url, store.client_env, log)
        try:
            yield durable
        finally:
            durable.stop()
    finally:
        store.stop()
