"""``lccn-subscriber serve``: run the service until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import signal

from subscriber.cli.helpers import EXIT_OK, Parents, Subparsers, settings_from

__all__ = ["add_parsers"]


def _cmd_serve(args: argparse.Namespace) -> int:
    from subscriber.logs import setup_logging
    from subscriber.service import Service

    settings = settings_from(args)
    setup_logging(settings.log.format, settings.log.level)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await Service(settings).serve_forever(stop)

    asyncio.run(run())
    return EXIT_OK


def add_parsers(subparsers: Subparsers, parents: Parents) -> None:
    """Add ``serve``.

    Arguments:
        subparsers: the root parser's subcommands.
        parents: the shared option parsers.
    """
    serve = subparsers.add_parser("serve", parents=parents.store, help="run the service")
    serve.add_argument("--host", help="listen address")
    serve.add_argument("--port", type=int, help="listen port")
    serve.add_argument("--log-format", choices=("json", "text"))
    serve.set_defaults(func=_cmd_serve)
