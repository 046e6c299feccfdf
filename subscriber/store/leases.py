"""Lane leases: one row per lane with an owner, an expiry and a fencing token.

A lane is run only by the holder of its lease. The holder renews it while
running; if the holder dies or stalls, the lease expires and any worker may
take the lane over (several replicas on one PostgreSQL rely on this).

Every acquisition bumps the lease's fencing token. The holder's job and step
writes are *fenced*: each runs, in its own transaction, after one conditional
update of the lease row (``WHERE lane AND owner AND token``); when it matches
nothing, the write is refused with :class:`~subscriber.errors.LeaseLost`. So a
holder that was paused past its lease (SIGSTOP, a long GC, a frozen VM) and
wakes up after a take-over writes nothing.

Lease operations do not queue behind the process's group-commit writer: on
PostgreSQL they run on their own connection, so a batch waiting for a row
lock (of a paused replica) never delays a renewal into a lost lease.

A replica paused in the middle of a statement can hold the lease row's lock
for as long as it is paused: asyncpg prepares a statement with Parse,
Describe and Flush (no Sync), so between the server's answer and the Bind the
session is *active*, waiting to read from its client, and neither
``idle_in_transaction_session_timeout`` nor ``statement_timeout`` ends it. A
take-over of an expired lease blocked that way (``lock_timeout``) ends the
stuck session with ``pg_terminate_backend`` (its transaction rolls back) and
tries once more: only a session that holds a lock on ``leases`` and has been
waiting for its client longer than ``lock_timeout``, and only while the
lease it blocks has expired.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from subscriber.errors import LeaseLost
from subscriber.store import statements as st
from subscriber.store.database import Database
from subscriber.store.tables import leases
from subscriber.store.writer import WriteQueue

__all__ = ["Fence", "HeldLease", "LeaseStore", "fenced"]

T = TypeVar("T")

log = logging.getLogger(__name__)

_LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout

# Sessions stuck mid-statement (waiting for their client) that hold a lock on leases,
# ended only while the lease of :lane has expired (or its owner is known dead).
_END_STUCK_HOLDERS = sa.text(
    """
    SELECT a.pid, pg_terminate_backend(a.pid)
    FROM pg_stat_activity a
    WHERE a.datname = current_database()
      AND a.pid <> pg_backend_pid()
      AND a.state = 'active' AND a.wait_event_type = 'Client' AND a.wait_event = 'ClientRead'
      AND a.state_change < now() - make_interval(secs => :stuck)
      AND EXISTS (
        SELECT 1 FROM pg_locks l
        WHERE l.pid = a.pid AND l.granted AND l.relation = 'leases'::regclass)
      AND EXISTS (
        SELECT 1 FROM leases
        WHERE lane = :lane AND (expires_at < :now OR owner = ANY(:take_over)))
    """
)


def _lock_timed_out(exc: BaseException) -> bool:
    """Whether a driver error is PostgreSQL's lock_timeout (SQLSTATE 55P03)."""
    seen: BaseException | None = exc
    while seen is not None:
        if getattr(seen, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
            return True
        seen = seen.__cause__ or getattr(seen, "orig", None)
    return False


@dataclass(frozen=True, slots=True)
class Fence:
    """Who holds a lane's lease, and with which token."""

    lane: str
    owner: str
    token: int

    def check(self, conn: Connection, *, live: bool = False) -> None:
        """Raise :class:`LeaseLost` unless the lease row still says (owner, token).

        Arguments:
            live: also require the lease not to have expired (before a step starts).
        """
        args = {
            "b_lane": self.lane,
            "b_owner": self.owner,
            "b_token": self.token,
            "b_now": time.time(),
        }
        stmt = st.LEASE_FENCE_LIVE if live else st.LEASE_FENCE
        if conn.execute(stmt, args).rowcount != 1:
            raise LeaseLost(
                f"the lease of lane {self.lane} (token {self.token}) is no longer ours; "
                "write refused",
                vnf_instance_id=self.lane,
            )


def fenced(
    fence: Fence | None, op: Callable[[Connection], T], *, live: bool = False
) -> Callable[[Connection], T]:
    """``op`` preceded, in its transaction, by the fence check (none without a fence)."""
    if fence is None:
        return op

    def write(conn: Connection) -> T:
        fence.check(conn, live=live)
        return op(conn)

    return write


def release_write(fence: Fence) -> Callable[[Connection], None]:
    """The release of ``fence``'s lease as an operation, to join another write."""
    args = {"b_lane": fence.lane, "b_owner": fence.owner, "b_token": fence.token}

    def write(conn: Connection) -> None:
        conn.execute(st.LEASE_RELEASE, args)

    return write


@dataclass(slots=True)
class HeldLease:
    """A lease as its holder sees it: the fence, and until when it is surely ours.

    ``valid_until`` is on the monotonic clock, counted from the moment the
    last successful acquisition or renewal was *sent*, so it never overestimates;
    a process paused past it finds out on its first look after waking.

    ``last_of_lane``: the dispatcher saw nothing else open in the lane, so the job
    may release the lease in its outcome's own write (one transaction fewer; an
    event appended meanwhile starts the lane again with a new lease).
    ``release_sent`` is set before that write, ``released`` once it committed.
    """

    fence: Fence
    valid_until: float
    lost_reason: str | None = field(default=None)
    last_of_lane: bool = False
    release_sent: bool = False
    released: bool = False

    def lose(self, reason: str) -> None:
        if self.lost_reason is None:
            self.lost_reason = reason

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease is lost or may have expired."""
        if self.lost_reason is None and time.monotonic() >= self.valid_until:
            self.lost_reason = "expired before it could be renewed"
        if self.lost_reason is not None:
            raise LeaseLost(
                f"the lease of lane {self.fence.lane} was lost ({self.lost_reason})",
                vnf_instance_id=self.fence.lane,
            )


class LeaseStore:
    def __init__(self, db: Database, *, writer: WriteQueue, lock_timeout: float = 5.0) -> None:
        self._db = db
        self._writer = writer  # kept for symmetry; lease writes go straight to the database
        self._pg = db.dialect_name == "postgresql"
        self._insert = db.insert(leases)
        self._lock_timeout = lock_timeout

    async def acquire(
        self, lane: str, owner: str, ttl: float, *, take_over: frozenset[str] = frozenset()
    ) -> int | None:
        """Take (or take again) the lease of ``lane`` for ``owner``; return its new fencing token.

        Succeeds when the lane is free, expired, already ours, or held by one
        of ``take_over`` (owners known to be dead, e.g. a previous process of
        this host). Returns ``None`` when another owner holds it.
        """
        token, _ = await self._acquire(lane, owner, ttl, take_over, None)
        return token

    @property
    def reads_with_acquire(self) -> bool:
        """Whether :meth:`acquire_and_read` saves a transaction: on PostgreSQL each costs
        round trips (the pool's ping, ``BEGIN``, ``COMMIT``). On SQLite the read would
        hold the one write lock longer, which ingest's commits wait for."""
        return self._pg

    async def acquire_and_read(
        self,
        lane: str,
        owner: str,
        ttl: float,
        read: Callable[[Connection], T],
        *,
        take_over: frozenset[str] = frozenset(),
    ) -> tuple[int | None, T | None]:
        """:meth:`acquire`, then ``read`` in the same transaction if the lease was taken.

        Returns:
            the new fencing token and ``read``'s result; ``(None, None)`` when another
            owner holds the lease.
        """
        return await self._acquire(lane, owner, ttl, take_over, read)

    async def _acquire(
        self,
        lane: str,
        owner: str,
        ttl: float,
        take_over: frozenset[str],
        read: Callable[[Connection], T] | None,
    ) -> tuple[int | None, T | None]:
        now = time.time()
        args = {
            "b_lane": lane,
            "b_owner": owner,
            "b_now": now,
            "b_expires_at": now + ttl,
            "b_take_over": sorted(take_over),
        }
        insert = (
            self._insert.values(
                lane=lane, owner=owner, acquired_at=now, expires_at=now + ttl, token=1
            )
            .on_conflict_do_nothing(index_elements=["lane"])
            .returning(leases.c.token)
        )

        def write(conn: Connection) -> tuple[int | None, T | None]:
            token = conn.execute(st.LEASE_TAKE, args).scalar()
            if token is None:
                token = conn.execute(insert).scalar()
            if token is None:
                return None, None
            return int(token), (read(conn) if read is not None else None)

        try:
            return await self._write(write)
        except DBAPIError as exc:
            if not (self._pg and _lock_timed_out(exc)):
                raise
            if not await self._end_stuck_holders(lane, sorted(take_over)):
                raise
        return await self._write(write)

    async def _end_stuck_holders(self, lane: str, take_over: list[str]) -> list[int]:
        """End the sessions stuck mid-statement that block the take-over of ``lane``."""
        args = {
            "lane": lane,
            "now": time.time(),
            "take_over": take_over,
            "stuck": self._lock_timeout,
        }

        def end(conn: Connection) -> list[int]:
            return [int(row[0]) for row in conn.execute(_END_STUCK_HOLDERS, args) if row[1]]

        ended = await self._write(end)
        if ended:
            log.warning(
                "ended database sessions stuck mid-statement holding the lease of an expired "
                "lane (a paused replica): their transactions roll back",
                extra={"vnfInstanceId": lane, "backends": ended},
            )
        return ended

    async def _write(self, op: Callable[[Connection], T]) -> T:
        result: T = (await self._db.write_batch([op]))[0]
        return result

    async def renew(self, fence: Fence, ttl: float) -> bool:
        """Extend our lease; False if it is no longer ours (taken over)."""
        args = {
            "b_lane": fence.lane,
            "b_owner": fence.owner,
            "b_token": fence.token,
            "b_expires_at": time.time() + ttl,
        }

        def write(conn: Connection) -> bool:
            return bool(conn.execute(st.LEASE_RENEW, args).rowcount)

        return await self._write(write)

    async def release(self, fence: Fence) -> None:
        """Let the lane go (the row stays, expired, so its token keeps growing)."""
        await self._write(release_write(fence))

    async def owners(self) -> list[str]:
        """Owners of leases not yet expired or released."""
        q = sa.select(leases.c.owner).where(leases.c.expires_at > time.time()).distinct()
        rows = await self._db.read(lambda conn: conn.execute(q).all())
        return [r[0] for r in rows]
