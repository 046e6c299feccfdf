"""Lane leases: one row per lane with an owner and an expiry.

A lane is run only by the holder of its lease. The holder renews it while
running; if the holder dies, the lease expires and any worker may take the
lane over (a later multi-replica deployment on PostgreSQL relies on this).
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from subscriber.store.database import Database
from subscriber.store.tables import leases
from subscriber.store.writer import WriteQueue

__all__ = ["LeaseStore"]


class LeaseStore:
    def __init__(self, db: Database, *, writer: WriteQueue) -> None:
        self._db = db
        self._writer = writer
        pg = db.dialect_name == "postgresql"
        self._insert = postgresql.insert(leases) if pg else sqlite.insert(leases)

    async def acquire(
        self, lane: str, owner: str, ttl: float, *, take_over: frozenset[str] = frozenset()
    ) -> bool:
        """Take or renew the lease of ``lane`` for ``owner``.

        Succeeds when the lane is free, expired, already ours, or held by one
        of ``take_over`` (owners known to be dead, e.g. a previous process of
        this host). Returns whether ``owner`` holds the lease now.
        """
        now = time.time()
        cond = sa.or_(leases.c.owner == owner, leases.c.expires_at < now)
        if take_over:
            cond = sa.or_(cond, leases.c.owner.in_(sorted(take_over)))
        update = (
            leases.update()
            .where(leases.c.lane == lane, cond)
            .values(owner=owner, acquired_at=now, expires_at=now + ttl)
        )
        insert = self._insert.values(
            lane=lane, owner=owner, acquired_at=now, expires_at=now + ttl
        ).on_conflict_do_nothing(index_elements=["lane"])

        def write(conn: Connection) -> bool:
            if conn.execute(update).rowcount:
                return True
            return bool(conn.execute(insert).rowcount)

        return await self._writer.run(write)

    async def renew(self, lane: str, owner: str, ttl: float) -> bool:
        """Extend our lease; False if we lost it."""
        stmt = (
            leases.update()
            .where(leases.c.lane == lane, leases.c.owner == owner)
            .values(expires_at=time.time() + ttl)
        )

        def write(conn: Connection) -> bool:
            return bool(conn.execute(stmt).rowcount)

        return await self._writer.run(write)

    async def release(self, lane: str, owner: str) -> None:
        stmt = leases.delete().where(leases.c.lane == lane, leases.c.owner == owner)

        def write(conn: Connection) -> None:
            conn.execute(stmt)

        await self._writer.run(write)

    async def owners(self) -> list[str]:
        q = sa.select(leases.c.owner).distinct()
        rows = await self._db.read(lambda conn: conn.execute(q).all())
        return [r[0] for r in rows]
