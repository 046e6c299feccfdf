"""One writer task, group commit for every write of the process.

SQLite has a single writer, and each transaction through aiosqlite costs
several thread hops plus a commit. Instead of each caller taking a lock and
committing alone, callers queue a write operation and await its future; the
writer runs everything queued in one transaction and commits once. Ingest
writes (priority 0) go before job checkpoints (priority 1), so acknowledging
Tacker never waits behind cluster work.

If a batch fails, it is rolled back and each operation is retried alone, so
one bad operation fails only its own caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from subscriber.errors import StoreError, StoreUnavailable
from subscriber.store.database import Database

__all__ = ["INGEST", "JOBS", "WriteOp", "WriteQueue"]

log = logging.getLogger(__name__)

T = TypeVar("T")
WriteOp = Callable[[Connection], Any]

INGEST = 0
JOBS = 1


class WriteQueue:
    """Serialises and batches writes; each caller returns after its own commit."""

    def __init__(self, db: Database, *, max_batch: int = 256) -> None:
        self._db = db
        self._max = max_batch
        self._heap: list[tuple[int, int, WriteOp, asyncio.Future[Any]]] = []
        self._seq = itertools.count()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.batches = 0
        self.ops = 0

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("WriteQueue already started")
        self._task = asyncio.create_task(self._loop(), name="store-writer")
        self._task.add_done_callback(self._done)

    async def stop(self) -> None:
        """Write everything queued, then stop (idempotent)."""
        self._closing = True
        task, self._task = self._task, None
        if task is None:
            return
        self._ready.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def _done(self, task: asyncio.Task[None]) -> None:
        exc = None if task.cancelled() else task.exception()
        err = StoreError(f"store writer stopped: {exc or 'cancelled'}")
        while self._heap:
            *_, future = heapq.heappop(self._heap)
            if not future.done():
                future.set_exception(err)
        if exc is not None:
            log.error("store writer died", exc_info=exc)

    async def run(self, op: Callable[[Connection], T], *, priority: int = JOBS) -> T:
        """Run ``op(conn)`` (a plain function) in the next committed batch; return its result.

        Raises:
            StoreUnavailable: the batch could not be committed (retriable).
            StoreError: the writer is stopped, or ``op`` itself failed.
        """
        if self._task is None or self._closing:
            raise StoreError("store writer is not running")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (priority, next(self._seq), op, future))
        self._ready.set()
        return await future

    async def _loop(self) -> None:
        while True:
            if not self._heap:
                if self._closing:
                    return
                self._ready.clear()
                await self._ready.wait()
                continue
            batch = [heapq.heappop(self._heap) for _ in range(min(self._max, len(self._heap)))]
            await self._commit([(op, fut) for _, _, op, fut in batch])

    async def _commit(self, batch: list[tuple[WriteOp, asyncio.Future[Any]]]) -> None:
        try:
            results = await self._db.write_batch([op for op, _ in batch])
        except Exception as exc:
            if len(batch) > 1:
                # Isolate the culprit: each operation alone.
                for op, fut in batch:
                    await self._commit([(op, fut)])
            else:
                self._fail(batch[0][1], exc)
            return
        self.batches += 1
        self.ops += len(batch)
        for (_, fut), result in zip(batch, results, strict=True):
            if not fut.done():
                fut.set_result(result)

    @staticmethod
    def _fail(fut: asyncio.Future[Any], exc: BaseException) -> None:
        if fut.done():
            return
        if not isinstance(exc, (SQLAlchemyError, OSError)):
            fut.set_exception(exc)  # the operation's own error, e.g. a bug
            return
        orig = getattr(exc, "orig", None)
        if orig is not None:
            text = f"{type(exc).__name__}: {type(orig).__name__}"
        else:
            text = type(exc).__name__
        err = StoreUnavailable(f"could not write to the store ({text})")
        err.__cause__ = exc
        fut.set_exception(err)
