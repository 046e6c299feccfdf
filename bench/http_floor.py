#!/usr/bin/env python3
"""The floor of HTTP ingest: the least a server can do and still store every notification.

An aiohttp server whose POST reads the body, decodes its JSON into the events
row our store writes (no schema validation, no auth, no metrics, no dedup
bookkeeping), and answers 204 once that row is committed: rows that arrive
while a transaction commits wait for the next one (group commit, one
transaction at a time, in a writer thread for SQLite), into the events table
alone (schema and indexes from ``subscriber/store/tables.py``) with the same
durability as ours. ``bench/ingest.py`` runs it as a context line beside the
no-op server: how far our ingest is from what its durable job costs here.

Usage (by bench/ingest.py): python bench/http_floor.py PORT PATH DATABASE_URL SYNCHRONOUS
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from aiohttp import web
from benchlib import serve_until_terminated
from kafka_ingest import FloorTable, floor_values


async def serve_floor(port: int, path: str, url: str, synchronous: str) -> None:
    table = FloorTable(url, synchronous)
    await table.create()
    loop = asyncio.get_running_loop()
    waiting: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
    wake = asyncio.Event()

    async def writer() -> None:
        while True:
            await wake.wait()
            wake.clear()
            while waiting:
                batch = waiting[:]
                del waiting[:]
                try:
                    await table.insert([row for row, _ in batch])
                except Exception as exc:  # every waiter answers 503
                    for _, future in batch:
                        future.set_exception(exc)
                    continue
                for _, future in batch:
                    future.set_result(None)

    async def post(request: web.Request) -> web.Response:
        raw = await request.read()
        row = floor_values(
            raw,
            time.time(),
            source="http",
            meta=None,
            api_version=request.headers.get("Version"),
        )
        future: asyncio.Future[None] = loop.create_future()
        waiting.append((row, future))
        wake.set()
        try:
            await future
        except Exception:
            return web.Response(status=503)
        return web.Response(status=204)

    task = asyncio.create_task(writer())
    try:
        await serve_until_terminated(port, path, post)
    finally:
        task.cancel()
        await table.close()


if __name__ == "__main__":
    port, path, url, synchronous = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    asyncio.run(serve_floor(port, path, url, synchronous))
