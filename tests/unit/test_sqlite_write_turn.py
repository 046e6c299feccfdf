"""SQLite write turns across processes: serve's worker gives way to its ingest process."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

from subscriber.store.database import _WriteTurn


def test_a_low_priority_writer_gives_way_while_another_waits(tmp_path: Path) -> None:
    """The worker (low) lets its ingest process (high) write first, for a bounded time."""
    path = tmp_path / "p.db"
    low = _WriteTurn(path, low_priority=True, yield_for=0.5)
    waiting = os.open(f"{path}-wanted", os.O_RDWR)  # an ingest writer waiting for the lock
    try:
        with low.held():  # nobody waits: at once
            pass
        assert low.yields == 0

        fcntl.flock(waiting, fcntl.LOCK_SH)
        threading.Timer(0.1, fcntl.flock, (waiting, fcntl.LOCK_UN)).start()
        started = time.monotonic()
        with low.held():  # gives way until the waiter has been served
            took = time.monotonic() - started
        assert low.yields > 0 and 0.09 < took < 0.45

        fcntl.flock(waiting, fcntl.LOCK_SH)  # a waiter that never goes: jobs slowed, not starved
        started = time.monotonic()
        with low.held():
            took = time.monotonic() - started
        assert 0.45 < took < 2
    finally:
        os.close(waiting)
        low.close()


def test_a_waiting_high_priority_writer_gets_the_lock_next(tmp_path: Path) -> None:
    """Even when a low-priority writer was waiting first (the turnstile alone would let it
    in first), the high-priority one that waits too gets the write lock next."""
    path = tmp_path / "q.db"
    high, low = _WriteTurn(path), _WriteTurn(path, low_priority=True, yield_for=5)
    second_low = _WriteTurn(path, low_priority=True, yield_for=5)
    order: list[str] = []
    try:
        with low.held():
            other = threading.Thread(target=_write, args=(second_low, order, "low"))
            other.start()
            time.sleep(0.05)  # the second low writer waits first ...
            waiter = threading.Thread(target=_write, args=(high, order, "high"))
            waiter.start()
            time.sleep(0.05)  # ... then the high one
        waiter.join(5)
        other.join(5)
    finally:
        for turn in (high, low, second_low):
            turn.close()
    assert order == ["high", "low"]
    assert second_low.yields > 0


def _write(turn: _WriteTurn, order: list[str], name: str) -> None:
    with turn.held():
        order.append(name)
        time.sleep(0.01)
