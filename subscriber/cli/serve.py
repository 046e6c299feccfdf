"""``lccn-subscriber serve``: run the service until SIGTERM or SIGINT.

``--role single`` (the default for now) runs everything in one process.
``--role all`` is two processes: this one takes notifications (HTTP, Kafka)
and stores them; the worker it starts (``--role worker`` with a link to it)
runs the jobs, so no job takes CPU from ingest. ``ingest`` and ``worker`` run
one side alone (several hosts, one PostgreSQL).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from subscriber.cli.helpers import EXIT_OK, Parents, Subparsers, settings_from

__all__ = ["add_parsers"]

ROLES = ("all", "ingest", "worker", "single")


def _worker_argv(args: argparse.Namespace) -> list[str]:
    """The worker's command line: this command's store and log options, role ``worker``."""
    argv = [sys.executable, "-m", "subscriber.cli", "serve", "--role", "worker"]
    if args.config:
        argv += ["--config", args.config]
    if args.database:
        argv += ["--database", args.database]
    if args.log_format:
        argv += ["--log-format", args.log_format]
    return argv


def _cmd_serve(args: argparse.Namespace) -> int:
    from subscriber.logs import setup_logging
    from subscriber.service import Service

    if args.link_fd is not None:
        from subscriber.worker_link import die_with_parent

        die_with_parent(args.parent_pid)
    settings = settings_from(args)
    role = "worker" if args.role == "worker" else None
    setup_logging(settings.log.format, settings.log.level, role=role)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if args.role == "all":
            service = Service(settings, role="ingest", worker_argv=_worker_argv(args))
        else:
            service = Service(settings, role=args.role, link_fd=args.link_fd)
        await service.serve_forever(stop)

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
    serve.add_argument(
        "--role",
        choices=ROLES,
        default="single",
        help="single: everything in one process (default); all: ingest here, jobs in a "
        "worker process it starts; ingest or worker: one side alone",
    )
    # Set by the parent of a worker: the link's descriptor and the pid to die with.
    serve.add_argument("--link-fd", type=int, help=argparse.SUPPRESS)
    serve.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    serve.set_defaults(func=_cmd_serve)
