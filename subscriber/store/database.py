"""Database access for the store: synchronous operations, run off the event loop.

Every read and write of the store is a plain function of a SQLAlchemy
``Connection``. Where it runs depends on the backend:

* SQLite (embedded default): a synchronous engine. Writes run on one
  dedicated writer thread (SQLite has a single writer anyway) over one connection
  it keeps, a whole group-commit batch per thread hop; reads run on a small thread pool with
  their own connections (WAL: readers never wait for the writer). Going
  through aiosqlite instead costs a thread hop per statement, which made
  batches slow enough to dominate ingest latency.
  Several processes write one file (``serve``'s ingest and worker, the CLI):
  each write transaction first takes an exclusive ``flock`` on
  ``<file>-writelock`` through a turnstile (see :class:`_WriteTurn`), so a
  writer waits in the kernel and is woken the moment the other commits,
  in turn, instead of SQLite's busy handler sleeping up to 100 ms between
  tries while the other process takes the lock again.
* PostgreSQL: the asyncpg dialect on a plain ``Engine``, each batch or read run
  whole in one greenlet (``greenlet_spawn``, what ``AsyncConnection.run_sync`` does),
  so SQLAlchemy's asyncio extension, whose package imports the ORM (~6 MB a
  process), is never loaded. A pooled connection is pinged only after it rested
  (:func:`_ping_when_idle`). A write that is one statement can run without ``BEGIN``
  and ``COMMIT`` (:meth:`Database.write_alone`): ingest's append batches do.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, make_url

from subscriber.config import DatabaseSettings

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite

__all__ = ["Database", "is_sqlite"]

T = TypeVar("T")
SyncOp = Callable[[Connection], Any]

# Each process holds up to five SQLite connections (a writer, four readers), each with
# its own page cache and prepared statements; what they hold stays for the process's
# life. SQLite's default page cache (2,000 KiB) fills up on a store of a few thousand
# events; the file's pages are in the kernel's page cache anyway, and in WAL mode a
# reader's cache is dropped whenever another connection commits.
_SQLITE_CACHE_KIB = 512
# Prepared statements kept per connection (the sqlite3 module's default: 128). The
# group-commit INSERT and the dedup SELECT differ in text with every batch size, and a
# prepared multi-row INSERT takes tens of KiB: 128 of them held ~4 MB in ingest's
# writer after a backlog. Every statement a job or an append repeats still fits.
_SQLITE_CACHED_STATEMENTS = 32
# The same on PostgreSQL (SQLAlchemy's asyncpg adapter keeps 100 per connection): the
# group commit's multi-row INSERT ... RETURNING and its dedup SELECT differ in text with
# every batch size, and ingest's writer connection held 112 of them after a backlog
# (~2 MB of the processes together; the other connections held 3 to 36).
_PG_CACHED_STATEMENTS = 32
# Seconds a PostgreSQL connection may sit in the pool and still be used without a ping.
_PG_PING_IDLE = 1.0
# The longest GIL switch interval (CPython's default: 5 ms) in a process with a SQLite
# writer thread; see _shorten_gil_switch_interval.
SQLITE_SWITCH_INTERVAL = 0.001


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _sync_sqlite_url(url: str) -> str:
    return str(make_url(url).set(drivername="sqlite"))


def _sqlite_file(url: str) -> Path | None:
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _shorten_gil_switch_interval() -> None:
    """Let the SQLite writer thread win the GIL back sooner from a busy event loop.

    The sqlite3 module gives the GIL up around every call into SQLite (each
    statement's steps, the commit and its fsync), and the writer then waits for it
    until the event loop's thread, busy decoding the next requests or records, is
    asked to let go: CPython asks once per switch interval, 5 ms by default. A group
    commit makes several such calls, so under load its rows waited for the GIL more
    than for the disk. PostgreSQL's driver runs on the loop itself, one reason why
    Kafka ingest into PostgreSQL runs faster than into SQLite. A shorter interval costs
    the loop a few more hand-overs a second; an interval already shorter is kept.
    """
    if sys.getswitchinterval() > SQLITE_SWITCH_INTERVAL:
        sys.setswitchinterval(SQLITE_SWITCH_INTERVAL)


class _WriteTurn:
    """Cross-process write turns on one SQLite file, by ``flock`` on files beside it, used
    only by the writer thread of each process. A killed holder's locks go with its
    descriptors.

    Fairness: a writer holds the turnstile while it waits for the write lock, so one
    that just committed and comes back at once queues behind the one already waiting.

    Priority: a process whose writes wait on nothing but the store (``serve``'s ingest:
    Tacker and Kafka wait for the commit) holds ``-wanted`` shared while it waits for
    the write lock. A process of lower priority (the worker: job checkpoints) that gets
    the write lock while one is waiting gives it up again and retries shortly, for at
    most ``yield_for`` seconds per transaction, then writes anyway (jobs are slowed,
    never starved).
    """

    def __init__(self, path: Path, *, low_priority: bool = False, yield_for: float = 0.1) -> None:
        self._turnstile = os.open(f"{path}-writeturn", os.O_RDWR | os.O_CREAT, 0o600)
        self._write = os.open(f"{path}-writelock", os.O_RDWR | os.O_CREAT, 0o600)
        self._wanted = os.open(f"{path}-wanted", os.O_RDWR | os.O_CREAT, 0o600)
        self._low = low_priority
        self._yield_for = yield_for
        self.yields = 0  # times a low-priority writer gave the lock up (tests, metrics)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        if self._low:
            self._take_low()
        else:
            fcntl.flock(self._wanted, fcntl.LOCK_SH)
            try:
                self._take()
            finally:
                fcntl.flock(self._wanted, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self._write, fcntl.LOCK_UN)

    def _take(self) -> None:
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._write, fcntl.LOCK_EX)
        finally:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)

    def _take_low(self) -> None:
        deadline = time.monotonic() + self._yield_for
        while True:
            self._take()
            if time.monotonic() >= deadline or not self._someone_waits():
                return
            fcntl.flock(self._write, fcntl.LOCK_UN)
            self.yields += 1
            time.sleep(0.0005)

    def _someone_waits(self) -> bool:
        try:
            fcntl.flock(self._wanted, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._wanted, fcntl.LOCK_UN)
        return False

    def close(self) -> None:
        for fd in (self._turnstile, self._write, self._wanted):
            with contextlib.suppress(OSError):
                os.close(fd)


class Database:
    """Runs store operations: ``await db.read(fn)``, ``await db.write_batch([op, ...])``."""

    def __init__(
        self, settings: DatabaseSettings, *, read_threads: int = 4, low_priority: bool = False
    ) -> None:
        self.url = settings.resolved_url()
        self.is_sqlite = is_sqlite(self.url)
        self.dialect_name = "sqlite" if self.is_sqlite else make_url(self.url).get_backend_name()
        self._async: Engine | None = None  # PostgreSQL: an asyncio dialect's engine
        self._write_engine: Engine | None = None
        # SQLite: the writer thread's one connection, kept between batches (touched only
        # on that thread, and by dispose() once it is idle).
        self._writer_conn: Connection | None = None
        self._read_engine: Engine | None = None
        self._writer_thread: ThreadPoolExecutor | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._turn: _WriteTurn | None = None
        if self.is_sqlite:
            path = _sqlite_file(self.url)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._turn = _WriteTurn(path, low_priority=low_priority)
            self._write_engine = self._sqlite_engine(settings, immediate=True, pool_size=1)
            self._read_engine = self._sqlite_engine(
                settings, immediate=False, pool_size=read_threads
            )
            self._writer_thread = ThreadPoolExecutor(1, thread_name_prefix="lccn-db-writer")
            self._readers = ThreadPoolExecutor(read_threads, thread_name_prefix="lccn-db-reader")
            _shorten_gil_switch_interval()
        else:
            server_settings = {
                "lock_timeout": str(int(settings.lock_timeout * 1000)),
                "idle_in_transaction_session_timeout": str(
                    int(settings.idle_in_transaction_timeout * 1000)
                ),
            }
            connect_args = (
                {
                    "server_settings": server_settings,
                    "prepared_statement_cache_size": _PG_CACHED_STATEMENTS,
                }
                if make_url(self.url).get_driver_name() == "asyncpg"
                else {}
            )
            # A plain Engine of the asyncio dialect (asyncpg's is the same class either
            # way; its pool is the asyncio-adapted one): SQLAlchemy's asyncio extension
            # would add only wrappers around it, and imports the ORM (~6 MB a process).
            self._async = sa.create_engine(
                self.url,
                pool_size=10,
                max_overflow=10,
                # The newest connection first: a few stay in use, the rest rest (and are
                # pinged before their next use, below).
                pool_use_lifo=True,
                connect_args=connect_args,
            )
            _ping_when_idle(self._async, _PG_PING_IDLE)

    def _sqlite_engine(
        self, settings: DatabaseSettings, *, immediate: bool, pool_size: int
    ) -> Engine:
        engine = sa.create_engine(
            _sync_sqlite_url(self.url),
            pool_size=pool_size,
            max_overflow=0,
            connect_args={
                "timeout": settings.busy_timeout,
                "check_same_thread": False,
                "cached_statements": _SQLITE_CACHED_STATEMENTS,
            },
        )
        busy_ms = int(settings.busy_timeout * 1000)
        synchronous = settings.sqlite_synchronous

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Take transaction control from the driver so "begin" below decides.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            _enter_wal(cur, settings.busy_timeout)
            cur.execute(f"PRAGMA synchronous={synchronous}")
            cur.execute(f"PRAGMA busy_timeout={busy_ms}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA cache_size=-{_SQLITE_CACHE_KIB}")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            # IMMEDIATE: take the write lock at BEGIN, never upgrade later
            # (a deferred upgrade can fail at once with SQLITE_BUSY).
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine

    def insert(self, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
        """An ``INSERT`` into ``table`` in this backend's dialect (with its ``ON CONFLICT``).

        The PostgreSQL dialect is imported only on PostgreSQL (~2 MB a process).
        """
        if self.dialect_name == "postgresql":
            from sqlalchemy.dialects import postgresql

            return postgresql.insert(table)
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)

    # -- running operations ----------------------------------------------------

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)``, which only reads, and return its result.

        SQLite: in a read transaction (one snapshot for all its statements). PostgreSQL:
        each statement on its own, as :meth:`write_alone` runs them: at READ COMMITTED
        (the default) every statement takes its own snapshot in a transaction too, and
        the ``BEGIN`` and the ``ROLLBACK`` that ends it were two round trips a read.
        """
        if self._async is not None:
            return await _statements_alone(self._async, fn)
        assert self._read_engine is not None
        engine = self._read_engine

        def run() -> T:
            with engine.connect() as conn:
                return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(self._readers, run)

    async def write_batch(self, ops: Sequence[SyncOp]) -> list[Any]:
        """Run ``ops`` in one transaction, commit once, return their results.

        An exception from any op rolls the whole batch back and propagates.
        """
        if self._async is not None:
            engine = self._async

            def write_in_greenlet() -> list[Any]:
                with engine.begin() as conn:
                    return _run_all(ops, conn)

            return await _in_greenlet(write_in_greenlet)
        turn = self._turn

        def run() -> list[Any]:
            turned = turn.held() if turn is not None else contextlib.nullcontext()
            with turned:
                conn = self._writer_connection()
                try:
                    with conn.begin():
                        return _run_all(ops, conn)
                except BaseException:
                    # Rolled back. Back to the pool, which resets it (and discards it after
                    # a disconnect), as each batch's connection was before: failures are
                    # rare, and the next batch checks it out again.
                    self._close_writer_connection()
                    raise

        return await asyncio.get_running_loop().run_in_executor(self._writer_thread, run)

    async def write_alone(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` where each statement commits on its own (PostgreSQL: no
        ``BEGIN`` or ``COMMIT``, two round trips fewer): for a write that is one
        statement. SQLite: in a write transaction, as :meth:`write_batch`."""
        if self._async is not None:
            return await _statements_alone(self._async, fn)
        result: T = (await self.write_batch([fn]))[0]
        return result

    def _writer_connection(self) -> Connection:
        """The writer thread's connection, opened on first use. Kept between batches: the
        pool's check-out, reset (a rollback) and check-in each batch held the GIL for
        about as long as the batch's own statements, while ingest's loop waited for it."""
        if self._writer_conn is None:  # a failed batch gave it back (run() above)
            assert self._write_engine is not None
            self._writer_conn = self._write_engine.connect()
        return self._writer_conn

    def _close_writer_connection(self) -> None:
        conn, self._writer_conn = self._writer_conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    async def run_sync_migration(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in a write transaction (schema migrations)."""
        results = await self.write_batch([fn])
        result: T = results[0]
        return result

    async def dispose(self) -> None:
        """Close every connection and thread (idempotent)."""
        if self._async is not None:
            await _in_greenlet(self._async.dispose)
        if self._writer_thread is not None:
            # On its own thread, after any batch still running there.
            await asyncio.get_running_loop().run_in_executor(
                self._writer_thread, self._close_writer_connection
            )
        for engine in (self._write_engine, self._read_engine):
            if engine is not None:
                engine.dispose()
        for pool in (self._writer_thread, self._readers):
            if pool is not None:
                pool.shutdown(wait=True)
        self._writer_thread = self._readers = None
        if self._turn is not None:
            self._turn.close()
            self._turn = None


def _ping_when_idle(engine: Engine, idle: float) -> None:
    """Ping a pooled connection at check-out when it sat unused for ``idle`` seconds or more;
    one that does not answer is replaced (the pool tries again with a new one).

    Instead of ``pool_pre_ping``, which pings at every check-out: with asyncpg a ping is
    three round trips (``BEGIN``, ``;``, ``ROLLBACK``) before every group commit, job
    write and read. A connection used a moment ago has just answered; if the server
    restarted since, its first statement fails as a disconnect and the pool drops its
    connections: that one call fails retriable (an append answers 503 with
    ``Retry-After``), as any call does while the server is away, and the next connects anew.
    """

    @sa.event.listens_for(engine, "checkin")
    def _checked_in(dbapi_conn: Any, record: Any) -> None:
        record.info["lccn_used_at"] = time.monotonic()

    @sa.event.listens_for(engine, "checkout")
    def _checked_out(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        used_at = record.info.get("lccn_used_at")
        if used_at is None or time.monotonic() - used_at < idle:
            return  # new, or used a moment ago
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:
            raise sa.exc.DisconnectionError(f"idle connection did not answer: {exc}") from exc


def _enter_wal(cur: Any, timeout: float) -> None:
    """``PRAGMA journal_mode=WAL``, retried while another process holds the file.

    SQLite answers this pragma "database is locked" at once, without its busy
    handler, while another connection converts a new file to WAL or, as the last
    one to close it, cleans up the WAL: replicas or CLI commands opening one new
    store together met it (about 1 in 100 first opens).
    """
    import sqlite3

    deadline = time.monotonic() + timeout
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


async def _in_greenlet(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a greenlet whose driver calls await on this loop (asyncio dialects)."""
    from sqlalchemy.util.concurrency import greenlet_spawn

    return await greenlet_spawn(fn)


async def _statements_alone(engine: Engine, fn: Callable[[Connection], T]) -> T:
    """``fn(conn)`` on a pooled connection of an asyncio dialect's ``engine`` where each
    statement runs on its own, without ``BEGIN`` and ``COMMIT`` or ``ROLLBACK``."""

    def run() -> T:
        with engine.connect() as conn:
            return fn(conn.execution_options(isolation_level="AUTOCOMMIT"))

    return await _in_greenlet(run)


def _run_all(ops: Sequence[SyncOp], conn: Connection) -> list[Any]:
    return [op(conn) for op in ops]
