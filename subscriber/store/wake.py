"""Waking separate workers on PostgreSQL: ``NOTIFY lccn_wake`` after each stored batch.

``serve --role ingest`` and ``serve --role worker`` may run on different hosts
and share only the database. The ingest side sends the lanes of every
committed append batch on the channel ``lccn_wake`` (a JSON list; a payload
stays under PostgreSQL's 8000-byte limit); each worker listening pokes its
dispatcher for those lanes at once. A notification lost to a dropped
connection is caught by the worker's rescan after it reconnects (and by
``dispatch.rescan_interval`` in any case), so this only shortens the wait.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence

from sqlalchemy.engine import make_url

from subscriber.lifecycle import Component
from subscriber.store.events import AppendedEvent

__all__ = ["CHANNEL", "PgWakeListener", "PgWakeSender"]

log = logging.getLogger(__name__)

CHANNEL = "lccn_wake"
_PAYLOAD_MAX = 7000


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _payloads(lanes: Sequence[str] | None) -> list[str]:
    if lanes is None:
        return ["null"]
    out: list[str] = []
    chunk: list[str] = []
    size = 2
    for lane in lanes:
        if chunk and size + len(lane) + 4 > _PAYLOAD_MAX:
            out.append(json.dumps(chunk))
            chunk, size = [], 2
        chunk.append(lane)
        size += len(lane) + 4
    if chunk:
        out.append(json.dumps(chunk))
    return out


class PgWakeSender(Component):
    """Ingest side: ``NOTIFY`` the lanes of every committed batch (one connection of its own)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self._dsn = _dsn(url)
        self._queue: asyncio.Queue[list[str] | None] = asyncio.Queue()

    async def _start(self) -> None:
        self._spawn("wake-sender", self._send_loop, restart=True)

    def on_appended(self, batch: Sequence[AppendedEvent]) -> None:
        lanes = sorted({e.lane for e in batch if e.lane is not None})
        if lanes:
            self._queue.put_nowait(lanes)

    def wake(self, lane: str | None = None) -> None:
        self._queue.put_nowait(None if lane is None else [lane])

    async def _send_loop(self) -> None:
        import asyncpg  # type: ignore[import-untyped]  # here: a SQLite serve never loads it

        conn = await asyncpg.connect(self._dsn)
        try:
            while True:
                lanes = await self._queue.get()
                for payload in _payloads(lanes):
                    await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)
        finally:
            await conn.close(timeout=2)


class PgWakeListener(Component):
    """Worker side: ``LISTEN lccn_wake`` and poke the dispatcher for each notification."""

    def __init__(self, url: str, poke: Callable[[str | None], None]) -> None:
        super().__init__()
        self._dsn = _dsn(url)
        self._poke = poke

    async def _start(self) -> None:
        self._spawn("wake-listener", self._listen, restart=True)

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            lanes = json.loads(payload)
        except ValueError:
            lanes = None
        if lanes is None:
            self._poke(None)
            return
        for lane in lanes:
            self._poke(str(lane))

    async def _listen(self) -> None:
        import asyncpg  # type: ignore[import-untyped]

        conn = await asyncpg.connect(self._dsn)
        closed = asyncio.Event()
        conn.add_termination_listener(lambda _c: closed.set())
        try:
            await conn.add_listener(CHANNEL, self._notified)
            # What was stored while we were not listening: a full rescan now.
            self._poke(None)
            await closed.wait()
            raise ConnectionError("the LISTEN connection to PostgreSQL closed")
        finally:
            if not conn.is_closed():
                await conn.close(timeout=2)
