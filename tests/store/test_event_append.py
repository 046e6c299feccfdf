"""Group-committed appends: dedup inside a batch and against the store, ids, results.

Runs on the SQLite file (explicit ids, multi-row INSERT) and on the machine's
PostgreSQL (INSERT ... ON CONFLICT ... RETURNING): both paths must agree.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from pathlib import Path

import pytest

from schemas import parse_notification
from subscriber.config import DatabaseSettings
from subscriber.store import AppendedEvent, NewEvent, Store
from tests.factories import op_occ

pytestmark = pytest.mark.asyncio


def _event(**kwargs: str) -> NewEvent:
    raw = json.dumps(op_occ(**kwargs)).encode()  # type: ignore[arg-type]
    return NewEvent(source="kafka", notification=parse_notification(raw), raw=raw)


async def test_append_many_dedups_inside_the_batch_and_against_the_store(store: Store) -> None:
    heard: list[AppendedEvent] = []
    store.events.add_listener(heard.extend)
    stored = _event(state="STARTING")
    first = await store.events.append(stored)
    assert not first.duplicate

    a = _event(state="PROCESSING")
    c = _event(state="COMPLETED")
    resent = _event(
        instance=stored.notification.vnfInstanceId,
        op_occ_id=stored.notification.vnfLcmOpOccId,  # type: ignore[union-attr]
        state="STARTING",
    )
    results = await store.events.append_many([a, resent, a, c])

    assert [r.duplicate for r in results] == [False, True, True, False]
    assert results[1].event_id == first.event_id
    assert results[2].event_id == results[0].event_id
    assert first.event_id < results[0].event_id < results[3].event_id
    rows = {e.id: e for e in await store.events.list()}
    assert sorted(rows) == [first.event_id, results[0].event_id, results[3].event_id]
    assert rows[results[0].event_id].dedup_key == a.dedup_key
    assert rows[results[3].event_id].dedup_key == c.dedup_key
    assert rows[results[3].event_id].body == c.stored_body()
    # Listeners hear each new event once, with its id.
    assert [(e.event_id, e.operation_state) for e in heard] == [
        (first.event_id, "STARTING"),
        (results[0].event_id, "PROCESSING"),
        (results[3].event_id, "COMPLETED"),
    ]


async def test_concurrent_appends_share_commits_and_get_distinct_ids(store: Store) -> None:
    singles = [_event() for _ in range(50)]
    batches = [[_event() for _ in range(40)] for _ in range(5)]
    single_results, batch_results = await asyncio.gather(
        asyncio.gather(*(store.events.append(e) for e in singles)),
        asyncio.gather(*(store.events.append_many(b) for b in batches)),
    )
    ids = [r.event_id for r in single_results] + [r.event_id for b in batch_results for r in b]
    assert len(ids) == len(set(ids)) == 250
    assert not any(r.duplicate for r in single_results)
    stored = {e.id: e.dedup_key for e in await store.events.list()}
    expected = {r.event_id: e.dedup_key for r, e in zip(single_results, singles, strict=True)}
    for batch, results in zip(batches, batch_results, strict=True):
        expected.update((r.event_id, e.dedup_key) for r, e in zip(results, batch, strict=True))
    assert stored == expected
    # Everything again: all duplicates, same ids, nothing added.
    again = await store.events.append_many([e for b in batches for e in b] + singles)
    assert all(r.duplicate for r in again)
    assert {r.event_id for r in again} == set(ids)
    assert len(await store.events.list()) == 250


def _at(instance: str, occ: str, state: str, second: int) -> NewEvent:
    body = op_occ(instance=instance, op_occ_id=occ, state=state)
    body["timeStamp"] = f"2026-11-22T07:00:{second:02d}Z"
    raw = json.dumps(body).encode()
    return NewEvent(source="http", notification=parse_notification(raw), raw=raw)


RETRIED = (
    ("STARTING", 0),
    ("PROCESSING", 1),
    ("FAILED_TEMP", 5),
    ("FAILED_TEMP", 6),  # the copy sent to a second subscription
    ("PROCESSING", 20),  # POST .../retry
    ("PROCESSING", 1),  # a late copy of the first run's PROCESSING
    ("FAILED_TEMP", 30),
    ("ROLLING_BACK", 40),
    ("ROLLED_BACK", 45),
)
# (state, attempt) of each stored event, and which arrivals were duplicates.
EXPECTED_STORED = [
    ("STARTING", 0),
    ("PROCESSING", 0),
    ("FAILED_TEMP", 0),
    ("PROCESSING", 1),
    ("FAILED_TEMP", 1),
    ("ROLLING_BACK", 2),
    ("ROLLED_BACK", 2),
]
EXPECTED_DUPLICATE = [False, False, False, True, False, True, False, False, False]


@pytest.mark.parametrize("together", [False, True], ids=["one-by-one", "one-batch"])
async def test_a_retried_op_occ_keeps_every_attempt_and_drops_copies(
    store: Store, together: bool
) -> None:
    inst, occ = f"i-{uuid.uuid4().hex[:8]}", f"o-{uuid.uuid4().hex[:8]}"
    news = [_at(inst, occ, state, second) for state, second in RETRIED]
    if together:  # a Kafka fetch after an outage brings them all at once
        results = await store.events.append_many(news)
    else:
        results = [await store.events.append(new) for new in news]
    assert [r.duplicate for r in results] == EXPECTED_DUPLICATE
    rows = await store.events.list(vnf_instance_id=inst)
    assert sorted((e.operation_state, e.op_occ_attempt) for e in rows) == sorted(EXPECTED_STORED)
    assert {e.dedup_key for e in rows if e.op_occ_attempt == 0} == {
        f"opocc|{occ}|{state}|{'START' if state == 'STARTING' else 'RESULT'}"
        for state in ("STARTING", "PROCESSING", "FAILED_TEMP")
    }
    # Everything again (a redelivery): nothing new.
    again = await store.events.append_many(news)
    assert all(r.duplicate for r in again)
    assert len(await store.events.list(vnf_instance_id=inst)) == len(EXPECTED_STORED)


async def test_a_commit_takes_what_arrived_while_it_waited_for_the_write_lock(
    tmp_path: Path,
) -> None:
    """A commit queued behind SQLite's write lock takes its appends when its transaction
    begins: everything that arrived while it waited goes in that one commit, not one
    commit per loop turn of arrivals (the p99 of ingest at a steady rate)."""
    path = tmp_path / "lccn.db"
    async with Store(DatabaseSettings(url=f"sqlite+aiosqlite:///{path}")) as store:
        commits: list[int] = []
        store.events.add_listener(lambda batch: commits.append(len(batch)))
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process's write transaction
            first = asyncio.ensure_future(store.events.append(_event()))
            later = []
            for _ in range(4):  # each in a loop turn of its own, well after the first
                await asyncio.sleep(0.05)
                later.append(asyncio.ensure_future(store.events.append(_event())))
            await asyncio.sleep(0.05)
            assert not first.done()
        finally:
            other.execute("ROLLBACK")
            other.close()
        results = await asyncio.gather(first, *later)
    assert len({r.event_id for r in results}) == 5
    assert commits == [5]


async def test_stopping_writes_the_appends_already_queued(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"
    async with Store(DatabaseSettings(url=url)) as store:
        pending = [asyncio.ensure_future(store.events.append(_event())) for _ in range(20)]
        await asyncio.sleep(0)  # queued, most not yet committed
    results = await asyncio.gather(*pending)
    async with Store(DatabaseSettings(url=url)) as again:
        stored = {e.id for e in await again.events.list()}
    assert stored == {r.event_id for r in results} and len(stored) == 20
