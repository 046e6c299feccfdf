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
import heapq
import itertools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from subscriber.errors import StoreError, StoreUnavailable
from subscriber.heap import trim_malloc
from subscriber.lifecycle import Component, State, wait_set
from subscriber.store.database import Database

__all__ = ["INGEST", "JOBS", "WriteOp", "WriteQueue"]

log = logging.getLogger(__name__)

T = TypeVar("T")
WriteOp = Callable[[Connection], Any]

INGEST = 0
JOBS = 1
_TASK = "store-writer"
# Seconds without a write after which the writer gives the memory its batches freed back.
IDLE_TRIM_AFTER = 1.0


class WriteQueue(Component):
    """Serialises and batches writes; each caller returns after its own commit.

    ``stop()`` writes everything queued first. Should the writer task crash,
    the operations queued then fail and the task is restarted.
    """

    def __init__(self, db: Database, *, max_batch: int = 256) -> None:
        super().__init__()
        self._db = db
        self._max = max_batch
        self._heap: list[tuple[int, int, WriteOp, asyncio.Future[Any]]] = []
        self._seq = itertools.count()
        self._ready = asyncio.Event()
        self.batches = 0
        self.ops = 0
        self._trimmed_at = 0  # self.batches when malloc was last trimmed

    async def _start(self) -> None:
        self._spawn(_TASK, self._loop, restart=True)

    async def _stop(self) -> None:
        # The loop returns once the queue is empty; then nobody may wait.
        self._ready.set()
        await self._join_task(_TASK)
        self._fail_queued(StoreError("store writer stopped"))

    def _on_task_error(self, name: str, exc: BaseException) -> None:
        self._fail_queued(StoreError(f"store writer stopped: {exc}"))

    def _fail_queued(self, err: StoreError) -> None:
        while self._heap:
            *_, future = heapq.heappop(self._heap)
            if not future.done():
                future.set_exception(err)

    async def run(self, op: Callable[[Connection], T], *, priority: int = JOBS) -> T:
        """Run ``op(conn)`` (a plain function) in the next committed batch; return its result.

        Raises:
            StoreUnavailable: the batch could not be committed (retriable).
            StoreError: the writer is stopped, or ``op`` itself failed.
        """
        if self.state is not State.RUNNING:
            raise StoreError("store writer is not running")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (priority, next(self._seq), op, future))
        self._ready.set()
        return await future

    async def _loop(self) -> None:
        while True:
            if not self._heap:
                if self.state is State.STOPPING:
                    return
                self._ready.clear()
                if self.batches == self._trimmed_at:
                    await self._ready.wait()
                    continue
                if not await wait_set(self._ready, IDLE_TRIM_AFTER):
                    # A burst of writes is over (ingest: a backlog stored): what its
                    # requests, rows and statements freed goes back to the kernel.
                    self._trimmed_at = self.batches
                    trim_malloc()
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
