"""The SQLite writer keeps its connection checked out between batches, and gives it back
to the pool after a batch that failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from subscriber.config import DatabaseSettings
from subscriber.store.database import Database


async def test_batches_keep_one_checkout_and_a_failed_batch_gives_it_back(
    tmp_path: Path,
) -> None:
    db = Database(DatabaseSettings(url=f"sqlite+aiosqlite:///{tmp_path / 's.db'}"), read_threads=1)
    checkouts: list[int] = []
    checkins: list[int] = []
    engine = db._write_engine
    assert engine is not None
    sa.event.listen(engine, "checkout", lambda *a: checkouts.append(1))
    sa.event.listen(engine, "checkin", lambda *a: checkins.append(1))

    def insert(value: int) -> Any:
        return lambda c: c.exec_driver_sql(f"INSERT INTO t VALUES ({value})")

    try:
        await db.write_batch([lambda c: c.exec_driver_sql("CREATE TABLE t (x INTEGER UNIQUE)")])
        for value in range(1, 6):
            await db.write_batch([insert(value)])
        # No check-out, reset (a rollback) and check-in per batch: they held the GIL.
        assert (len(checkouts), len(checkins)) == (1, 0)
        with pytest.raises(sa.exc.IntegrityError):
            await db.write_batch([insert(9), insert(1)])  # rolled back whole
        assert (len(checkouts), len(checkins)) == (1, 1)
        await db.write_batch([insert(6)])
        assert (len(checkouts), len(checkins)) == (2, 1)
        rows = await db.read(lambda c: [x for (x,) in c.exec_driver_sql("SELECT x FROM t")])
        assert sorted(rows) == [1, 2, 3, 4, 5, 6]
    finally:
        await db.dispose()
    assert len(checkins) == 2  # dispose gave the writer's back before closing the pool
