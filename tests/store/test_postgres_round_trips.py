"""PostgreSQL round trips: an append batch is one statement that commits on its own (where
``BEGIN``, a FAILED_TEMP lookup, the insert and ``COMMIT`` were four), a batch whose
op-occ failed before still numbers its attempts in a transaction, and a read is its
statements alone (no ``BEGIN``, no ``ROLLBACK``)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest
import sqlalchemy as sa

from schemas import parse_notification
from subscriber.config import DatabaseSettings
from subscriber.store import NewEvent, Store
from tests.factories import op_occ

pytestmark = [pytest.mark.postgres, pytest.mark.asyncio]


def _event(
    instance: str | None = None, occ: str | None = None, state: str = "STARTING", second: int = 0
) -> NewEvent:
    body = op_occ(
        instance=instance or str(uuid.uuid4()), op_occ_id=occ or str(uuid.uuid4()), state=state
    )
    body["timeStamp"] = f"2026-11-29T07:00:{second:02d}Z"
    raw = json.dumps(body).encode()
    return NewEvent(source="http", notification=parse_notification(raw), raw=raw)


class _Wire:
    """What the store's connections send: statements, and transactions begun."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.statements: list[str] = []
        self.begins = 0
        engine = store.db._async
        assert engine is not None
        sa.event.listen(engine, "before_cursor_execute", self._statement)
        start = asyncpg.transaction.Transaction.start

        async def counted(transaction: Any) -> None:
            self.begins += 1
            await start(transaction)

        monkeypatch.setattr(asyncpg.transaction.Transaction, "start", counted)

    def _statement(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        self.statements.append(statement)

    def clear(self) -> None:
        self.statements.clear()
        self.begins = 0


async def test_an_append_batch_is_one_statement_and_no_transaction(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Store(DatabaseSettings(url=pg_url)) as store:
        batches: list[int] = []
        store.events.add_observer(lambda seen: batches.append(len(seen)))
        wire = _Wire(store, monkeypatch)

        news = [_event() for _ in range(40)]
        results = await asyncio.gather(*(store.events.append(n) for n in news))
        assert not any(r.duplicate for r in results)
        assert len({r.event_id for r in results}) == 40
        assert wire.begins == 0
        assert len(wire.statements) == len(batches) >= 1
        assert all(s.startswith("WITH batch AS") for s in wire.statements)

        # Copies: nothing is added, and one more look (copies only) finds their ids.
        wire.clear()
        batches.clear()
        again = await store.events.append_many([*news[:10], news[0]])
        assert [r.event_id for r in again] == [r.event_id for r in results[:10]] + [
            results[0].event_id
        ]
        assert all(r.duplicate for r in again)
        assert wire.begins == 0
        assert len(wire.statements) == 2
        assert wire.statements[1].startswith("SELECT dedup_key, id FROM events")
        assert len(await store.events.list()) == 40


async def test_an_op_occ_that_failed_before_is_numbered_in_a_transaction(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Store(DatabaseSettings(url=pg_url)) as store:
        inst, occ = str(uuid.uuid4()), str(uuid.uuid4())
        for second, state in enumerate(("STARTING", "PROCESSING", "FAILED_TEMP")):
            await store.events.append(_event(inst, occ, state, second))
        wire = _Wire(store, monkeypatch)

        other = _event()
        retried, fresh = await store.events.append_many([_event(inst, occ, "PROCESSING", 9), other])

        # The one statement saw the stored FAILED_TEMP and stored nothing; the
        # transaction after it numbered the retry's attempt and stored both.
        assert wire.begins == 1
        assert wire.statements[0].startswith("WITH batch AS")
        assert not retried.duplicate and not fresh.duplicate
        rows = {e.id: e for e in await store.events.list()}
        assert len(rows) == 5
        assert (rows[retried.event_id].operation_state, rows[retried.event_id].op_occ_attempt) == (
            "PROCESSING",
            1,
        )
        assert rows[fresh.event_id].dedup_key == other.dedup_key


async def test_a_read_sends_its_statements_and_nothing_else(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Store(DatabaseSettings(url=pg_url)) as store:
        stored = await store.events.append(_event())
        rollbacks: list[object] = []
        rollback = asyncpg.transaction.Transaction.rollback

        async def counted(transaction: Any) -> None:
            rollbacks.append(transaction)
            await rollback(transaction)

        monkeypatch.setattr(asyncpg.transaction.Transaction, "rollback", counted)
        wire = _Wire(store, monkeypatch)

        row = await store.events.get(stored.event_id)
        assert row is not None and row.id == stored.event_id
        await store.events.queue_stats()
        assert wire.begins == 0 and rollbacks == []
        assert wire.statements  # the reads went to the server

        # A read that fails leaves its connection fit for the next one.
        with pytest.raises(sa.exc.DBAPIError):
            await store.db.read(lambda c: c.exec_driver_sql("SELECT 1/0").all())
        assert await store.db.read(lambda c: c.exec_driver_sql("SELECT 2").scalar()) == 2
