"""Lane leases: one row per lane with an owner and an expiry.

A lane is run only by the holder of its lease. The holder renews it while
running; if the holder dies, the lease expires and any worker may take the
lane over (a later multi-replica deployment on PostgreSQL relies on this).
"""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from subscriber.store.tables import leases

__all__ = ["LeaseStore"]


class LeaseStore:
    def __init__(
        self, write_engine: AsyncEngine, *, write_lock: AbstractAsyncContextManager[Any]
    ) -> None:
        self._write = write_engine
        self._lock = write_lock

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
        async with self._lock:
            async with self._write.begin() as conn:
                res = await conn.execute(
                    leases.update()
                    .where(leases.c.lane == lane, cond)
                    .values(owner=owner, acquired_at=now, expires_at=now + ttl)
                )
                if res.rowcount:
                    return True
            try:
                async with self._write.begin() as conn:
                    await conn.execute(
                        leases.insert().values(
                            lane=lane, owner=owner, acquired_at=now, expires_at=now + ttl
                        )
                    )
                return True
            except IntegrityError:
                return False

    async def renew(self, lane: str, owner: str, ttl: float) -> bool:
        """Extend our lease; False if we lost it."""
        async with self._lock, self._write.begin() as conn:
            res = await conn.execute(
                leases.update()
                .where(leases.c.lane == lane, leases.c.owner == owner)
                .values(expires_at=time.time() + ttl)
            )
            return bool(res.rowcount)

    async def release(self, lane: str, owner: str) -> None:
        async with self._lock, self._write.begin() as conn:
            await conn.execute(
                leases.delete().where(leases.c.lane == lane, leases.c.owner == owner)
            )

    async def owners(self) -> list[str]:
        async with self._write.connect() as conn:
            return [r[0] for r in (await conn.execute(sa.select(leases.c.owner).distinct())).all()]
