"""Small aiohttp servers of the tests, each on a free port chosen at run time."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def listen(runner: web.AppRunner, host: str = "127.0.0.1") -> str:
    """Set ``runner`` up and serve it on a free port of ``host``; its base URL.

    The caller cleans ``runner`` up."""
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return f"http://{host}:{port}"


@asynccontextmanager
async def serving(*routes: tuple[str, str, Handler]) -> AsyncIterator[str]:
    """An app of ``routes`` (method, path, handler) served on a free loopback port while the
    ``async with`` lasts; its base URL."""
    app = web.Application()
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
    runner = web.AppRunner(app)
    try:
        yield await listen(runner)
    finally:
        await runner.cleanup()
