"""Small aiohttp servers of the tests, each on a free port chosen at run time."""

from __future__ import annotations

from aiohttp import web


async def listen(runner: web.AppRunner, host: str = "127.0.0.1") -> str:
    """Set ``runner`` up and serve it on a free port of ``host``; its base URL.

    The caller cleans ``runner`` up."""
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return f"http://{host}:{port}"
