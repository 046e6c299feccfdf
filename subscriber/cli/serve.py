"""``lccn-subscriber serve``: run the service until SIGTERM or SIGINT.

``--role all`` (the default) is two processes: this one takes notifications
(HTTP, Kafka) and stores them; the worker it forks runs the jobs at a lower CPU
priority, so no job takes CPU from ingest. ``single`` runs everything in one
process; ``ingest`` and ``worker`` run one side alone (several hosts, one
PostgreSQL). ``relay`` is Tacker's callback endpoint that produces each
notification to Kafka and keeps no store (:mod:`subscriber.relay`).

A store behind the schema head is migrated first, by ``lccn-subscriber db
upgrade`` in a short-lived child process: Alembic (about 10 MB resident) is
then never loaded into serve's long-lived processes.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from subscriber import tracing
from subscriber.cli.helpers import EXIT_OK, Parents, Subparsers, settings_from

if TYPE_CHECKING:
    from subscriber.config import Settings

__all__ = ["add_parsers"]

log = logging.getLogger(__name__)

T = TypeVar("T")

ROLES = ("all", "ingest", "worker", "single", "relay")


def _store_options(args: argparse.Namespace) -> list[str]:
    """This command's ``--config`` and ``--database``, for a child command."""
    argv = []
    if args.config:
        argv += ["--config", args.config]
    if args.database:
        argv += ["--database", args.database]
    return argv


def _worker_argv(args: argparse.Namespace) -> list[str]:
    """The worker's command line: this command's store and log options, role ``worker``."""
    argv = [sys.executable, "-m", "subscriber.cli", "serve", "--role", "worker"]
    argv += _store_options(args)
    if args.log_format:
        argv += ["--log-format", args.log_format]
    return argv


def _cmd_serve(args: argparse.Namespace) -> int:
    from subscriber.heap import limit_malloc_arenas
    from subscriber.logs import setup_logging
    from subscriber.service import Service

    limit_malloc_arenas()  # before the store's threads start
    settings = settings_from(args)
    if args.link_fd is not None:  # a worker started afresh by its serve (a restart)
        from subscriber.worker_link import die_with_parent

        die_with_parent(args.parent_pid)
        return _run_worker(settings, args.link_fd)
    setup_logging(settings.log.format, settings.log.level)
    tracing.check(settings.tracing)  # the extra is there, before anything forks
    if args.role == "relay":
        return _run_relay(settings)
    # Before the fork: neither process then holds Alembic.
    code = asyncio.run(_migrate_first(args, settings))
    if code is not None:
        return code
    forked = None
    if args.role == "all":
        from subscriber.heap import freeze_long_lived
        from subscriber.worker_link import die_with_parent, fork_worker

        parent = os.getpid()

        def worker(fd: int) -> int:
            die_with_parent(parent)
            return _run_worker(settings, fd)

        if settings.tacker.configured:  # both processes will start a Tacker client
            from subscriber.tacker.auth import preload_auth

            preload_auth(settings.tacker)
        # What both processes load at start is imported (the libraries of parts this
        # configuration does not use never are), and no thread runs yet: the worker
        # forked now shares this heap (frozen, so collections do not copy it page by page).
        freeze_long_lived()
        forked = fork_worker(worker)

    async def run() -> None:
        stop = _stop_on_signals()
        if args.role == "all":
            service = Service(
                settings, role="ingest", worker_argv=_worker_argv(args), worker_fork=forked
            )
        else:
            service = Service(settings, role=args.role)
        await service.serve_forever(stop)

    # After the fork: the exporter's thread belongs to this process alone.
    tracing.configure(settings.tracing, role="ingest" if args.role == "all" else args.role)
    try:
        asyncio.run(run())
    finally:
        tracing.shutdown()
    return EXIT_OK


class _Abandoned(Exception):
    """SIGTERM or SIGINT came while serve was starting."""


async def _until_stopped(stop: asyncio.Event, work: Awaitable[T]) -> T:
    """``work``'s result, unless ``stop`` is set first: then ``work`` is cancelled.

    Raises:
        _Abandoned: ``stop`` was set first.
    """
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise _Abandoned
    return task.result()


async def _exit_code(proc: subprocess.Popen[bytes]) -> int:
    """``proc``'s exit code once it has exited, with no thread left waiting for it."""
    from subscriber.worker_link import until_exited

    await until_exited(proc.pid)
    return proc.wait()  # it has exited: reaped at once


async def _migrate_first(args: argparse.Namespace, settings: Settings) -> int | None:
    """Bring a store behind the schema head to it with ``db upgrade`` in a child process.

    The service's own start finds the store current and leaves Alembic unloaded (were
    it still behind, say a newer replica's revision, the service migrates or fails
    in-process as before).

    Returns:
        ``None`` to go on; else the exit code serve ends with: the child's (its one-line
        error is on stderr already), or 0 after SIGTERM/SIGINT (the start is abandoned).

    Raises:
        StoreUnavailable: the store cannot be reached to read its revision.
    """
    from subscriber.store import schema_revision
    from subscriber.store.migrate import HEAD_REVISION

    stop = _stop_on_signals()
    proc: subprocess.Popen[bytes] | None = None
    try:
        if await _until_stopped(stop, schema_revision(settings.database)) == HEAD_REVISION:
            return None
        argv = [sys.executable, "-m", "subscriber.cli"]
        if args.debug:
            argv.append("--debug")
        argv += ["db", "upgrade", *_store_options(args)]
        # Popen returns once the child runs; its stderr is ours: a failure's one line.
        proc = subprocess.Popen(  # noqa: ASYNC220
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )
        code = await _until_stopped(stop, _exit_code(proc))
    except _Abandoned:
        log.info("stop asked for while starting: the start is abandoned")
        if proc is not None and proc.poll() is None:
            proc.terminate()  # a migration's transaction rolls back with its connection
            await _exit_code(proc)
        return EXIT_OK
    if code != 0:
        return code if code > 0 else 128 - code  # killed by a signal: as a shell says it
    log.debug("store migrated to revision %s by a db upgrade child process", HEAD_REVISION)
    return None


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _run_relay(settings: Settings) -> int:
    """``serve --role relay``: the callback, produced to Kafka (no store, no migration).

    Raises:
        ConfigError: Kafka is not configured.
    """
    from subscriber.errors import ConfigError
    from subscriber.relay import Relay

    if not settings.kafka.enabled:
        raise ConfigError(
            "serve --role relay produces to Kafka: set kafka.bootstrap_servers "
            "(LCCN_KAFKA__BOOTSTRAP_SERVERS)"
        )

    async def run() -> None:
        await Relay(settings).serve_forever(_stop_on_signals())

    tracing.configure(settings.tracing, role="relay")
    try:
        asyncio.run(run())
    finally:
        tracing.shutdown()
    return EXIT_OK


def _run_worker(settings: Settings, link_fd: int) -> int:
    """``serve``'s worker: wait for the parent's go, lower the priority, run the jobs."""
    from subscriber.logs import setup_logging
    from subscriber.service import Service
    from subscriber.worker_link import lower_priority, wait_for_start

    # SIGTERM before the go (the parent is stopping as it starts) ends us at once.
    if not wait_for_start(link_fd):
        return 1
    lower_priority(settings.dispatch.worker_nice)
    setup_logging(settings.log.format, settings.log.level, role="worker")

    async def run() -> None:
        stop = _stop_on_signals()
        await Service(settings, role="worker", link_fd=link_fd).serve_forever(stop)

    tracing.configure(settings.tracing, role="worker")
    try:
        asyncio.run(run())
    finally:
        tracing.shutdown()
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
        default="all",
        help="all (default): ingest here, jobs in a worker process it starts; single: "
        "everything in one process; ingest or worker: one side alone; relay: the callback "
        "endpoint that produces each notification to Kafka (no store)",
    )
    # Set by the parent of a worker: the link's descriptor and the pid to die with.
    serve.add_argument("--link-fd", type=int, help=argparse.SUPPRESS)
    serve.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    serve.set_defaults(func=_cmd_serve)
