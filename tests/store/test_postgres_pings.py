"""PostgreSQL: pooled connections are pinged before use only after resting, and a rested
one the server dropped is replaced without the caller seeing it."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg  # type: ignore[import-untyped,unused-ignore]
import pytest
from sqlalchemy.engine import Connection

from subscriber.config import DatabaseSettings
from subscriber.store import database
from subscriber.store.database import Database
from tests.backends import pg_dsn

pytestmark = [pytest.mark.postgres, pytest.mark.asyncio]


def _backend_pid(conn: Connection) -> int:
    return int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())


async def test_busy_connections_are_not_pinged_and_a_dropped_rested_one_is_replaced(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "_PG_PING_IDLE", 0.5)
    db = Database(DatabaseSettings(url=pg_url))
    engine = db._async
    assert engine is not None
    pings: list[Any] = []
    ping = engine.dialect.do_ping

    def counted(dbapi_conn: Any) -> bool:
        pings.append(dbapi_conn)
        return ping(dbapi_conn)

    monkeypatch.setattr(engine.dialect, "do_ping", counted)
    try:
        await db.write_batch([lambda c: c.exec_driver_sql("CREATE TABLE t (x int)")])
        for _ in range(20):  # one after another: the same connection, just used
            await db.write_batch([lambda c: c.exec_driver_sql("INSERT INTO t VALUES (1)")])
            await db.read(_backend_pid)
        assert pings == []  # pool_pre_ping made 40 (three round trips each)

        pid = await db.read(_backend_pid)
        await asyncio.sleep(0.6)  # rested: pinged at its next use
        await db.read(_backend_pid)
        assert len(pings) == 1

        await asyncio.sleep(0.6)
        admin = await asyncpg.connect(pg_dsn(pg_url))
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()
        # The ping finds it gone; the pool connects anew and the batch goes through.
        (new_pid,) = await db.write_batch([_backend_pid])
        assert new_pid != pid
        count = await db.read(lambda c: c.exec_driver_sql("SELECT count(*) FROM t").scalar())
        assert count == 20
    finally:
        await db.dispose()
