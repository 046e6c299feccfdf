"""``lccn-subscriber serve`` processes consuming from a real broker.

SIGKILL mid-stream and a restart lose nothing and store nothing twice; two
replicas in one group (one PostgreSQL database) split the partitions.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from subscriber.cli.kafka import group_lag
from subscriber.config import DatabaseSettings
from subscriber.store import EventRow, Store
from tests.kafka.helpers import (
    create_topic,
    fast_settings,
    produce,
    transitions,
    uid,
    wait_until,
)
from tests.programs import ServeProcess

_ASSIGNED = re.compile(r"kafka partitions assigned: (.*)$")


class Serve(ServeProcess):
    """One ``lccn-subscriber serve`` process with Kafka ingest, logging (text) to a file."""

    def __init__(
        self, tmp_path: Path, name: str, db_url: str, bootstrap: str, topic: str, group: str
    ) -> None:
        kafka = {
            "LCCN_LOG__LEVEL": "INFO",
            "LCCN_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "LCCN_KAFKA__TOPICS": topic,
            "LCCN_KAFKA__GROUP_ID": group,
            "LCCN_KAFKA__CLIENT_ID": name,
            "LCCN_KAFKA__SESSION_TIMEOUT": "6",
            "LCCN_KAFKA__HEARTBEAT_INTERVAL": "0.5",
            "LCCN_KAFKA__COMMIT_INTERVAL": "0.2",
            "LCCN_KAFKA__REVOKE_DRAIN_TIMEOUT": "2",
        }
        args = ("--log-format", "text")
        super().__init__(tmp_path, env=kafka, database=db_url, args=args, clean=True)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def last_assignment(self) -> set[str] | None:
        """The partitions of the last 'assigned' log line (None before the first)."""
        found = None
        if self.log.exists():
            for line in self.log.read_text(errors="replace").splitlines():
                m = _ASSIGNED.search(line)
                if m:
                    found = {p for p in m.group(1).split(", ") if p and p != "-"}
        return found


@pytest.fixture
def serves(tmp_path: Path) -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for serve in started:
        serve.stop()


async def _events(db_url: str) -> list[EventRow]:
    async with Store(DatabaseSettings(url=db_url), migrate=False) as store:
        return await store.events.list()


async def _count(db_url: str) -> int:
    try:
        return len(await _events(db_url))
    except Exception:
        return 0  # not migrated yet


async def test_sigkill_mid_stream_then_restart(
    broker: Any, tmp_path: Path, db_url: str, serves: list[Serve]
) -> None:
    topic, group = uid("topic"), uid("group")
    await create_topic(broker.bootstrap, topic, 3)
    bodies = transitions(3000)
    await produce(broker.bootstrap, topic, bodies)

    first = Serve(tmp_path, "replica-a", db_url, broker.bootstrap, topic, group)
    serves.append(first)
    first.start()
    await wait_until(lambda: _atleast(db_url, 100), 60, interval=0.02, what="first events")
    first.signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    at_kill = await _count(db_url)
    assert 0 < at_kill < 3000, "the kill did not land mid-stream"

    again = Serve(tmp_path, "replica-a2", db_url, broker.bootstrap, topic, group)
    serves.append(again)
    again.start()
    await wait_until(lambda: _atleast(db_url, 3000), 90, what="all 3000 events")
    settings = fast_settings(broker.bootstrap, topic, group)
    await wait_until(lambda: _lag_zero(settings), 30, what="everything committed")

    again.signal(signal.SIGTERM)
    assert again.wait() == 0
    events = await _events(db_url)
    assert len(events) == 3000
    assert len({e.dedup_key for e in events}) == 3000
    assert {e.vnf_lcm_op_occ_id for e in events} == {b["vnfLcmOpOccId"] for b in bodies}


async def _atleast(db_url: str, n: int) -> bool:
    return await _count(db_url) >= n


async def _lag_zero(settings: Any) -> bool:
    rows = await group_lag(settings)
    return len(rows) == 3 and sum(r["lag"] for r in rows) == 0


@pytest.mark.postgres
async def test_two_replicas_split_partitions_on_postgres(
    broker: Any, tmp_path: Path, pg_url: str, serves: list[Serve]
) -> None:
    topic, group = uid("topic"), uid("group")
    await create_topic(broker.bootstrap, topic, 3)
    a = Serve(tmp_path, "replica-a", pg_url, broker.bootstrap, topic, group)
    b = Serve(tmp_path, "replica-b", pg_url, broker.bootstrap, topic, group)
    serves += [a, b]
    a.start()
    await wait_until(lambda: (a.last_assignment() or set()) != set(), 60, what="a joined")
    b.start()  # after a migrated the database

    def split() -> bool:
        pa, pb = a.last_assignment() or set(), b.last_assignment() or set()
        return bool(pa) and bool(pb) and not (pa & pb) and len(pa | pb) == 3

    await wait_until(split, 60, what="the partitions split between a and b")
    bodies = transitions(900)
    await produce(broker.bootstrap, topic, bodies)
    await wait_until(lambda: _atleast(pg_url, 900), 60, what="900 events")
    settings = fast_settings(broker.bootstrap, topic, group)
    await wait_until(lambda: _lag_zero(settings), 30, what="everything committed")
    for serve in (a, b):
        serve.signal(signal.SIGTERM)
    assert [a.wait(), b.wait()] == [0, 0]

    events = await _events(pg_url)
    assert len(events) == 900
    assert len({e.dedup_key for e in events}) == 900
    consumers_of: dict[int, set[str]] = {}
    for e in events:
        kafka = e.meta_json()["kafka"]
        consumers_of.setdefault(kafka["partition"], set()).add(kafka["consumer"])
    assert sorted(consumers_of) == [0, 1, 2]
    # Each partition was read by exactly one replica, and both replicas read some.
    assert all(len(c) == 1 for c in consumers_of.values())
    assert set().union(*consumers_of.values()) == {"replica-a", "replica-b"}
    assert {f"{topic}/{p}" for p in range(3)} == (a.last_assignment() or set()) | (
        b.last_assignment() or set()
    )
