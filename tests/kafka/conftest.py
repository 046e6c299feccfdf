"""The kafka tier's own fixture: a broker of one test alone (the session's is shared)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testbed import kafka_broker


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[kafka_broker.Broker]:
    """A broker of this test alone (for tests that stop and start it)."""
    running = kafka_broker.start_broker(log=tmp_path / "tansu.log")
    yield running
    running.stop()
