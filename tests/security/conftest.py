"""Fixtures of the security suite: a throw-away PostgreSQL database, a Kafka broker, two
sshd hosts, and the tacker tier's simulated OpenStack (a real instantiation needs one).

Each test file here covers one area of issue 29 ("a notification is a claim, Tacker
is the truth"); a test is named after what it prevents and goes through the real
part where the path does (PostgreSQL, the broker, sshd test hosts, Tacker).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends import pg_database
from tests.tacker.conftest import sim
from tests.testbed import kafka_broker, testhosts

__all__ = ["broker", "pg_url", "sim", "ssh_bed"]


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A fresh database on the machine's PostgreSQL, dropped afterwards."""
    async with pg_database() as url:
        yield url


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kafka_broker.Broker]:
    """A Kafka-protocol broker for the session (tests use unique topics and groups)."""
    try:
        kafka_broker.tansu_binary()
    except FileNotFoundError as exc:
        pytest.fail(str(exc))
    running = kafka_broker.start_broker(log=Path(tmp_path_factory.mktemp("kafka")) / "tansu.log")
    yield running
    running.stop()


@pytest.fixture(scope="session")
def ssh_bed() -> Iterator[Any]:
    """Two real sshd hosts in network namespaces (``testhosts.TestBed``), with a password
    user; the bed's client key is authorised for root and that user."""
    if os.geteuid() != 0:
        pytest.fail("the sshd test hosts need root (network namespaces)")
    if not Path(testhosts.SSHD).exists() or shutil.which("unshare") is None:
        pytest.fail("sshd missing: run scripts/setup.d/10-sshd.sh (scripts/test.sh does)")
    bed = testhosts.create(2, password=True)
    try:
        yield bed
    finally:
        testhosts.destroy(bed)
