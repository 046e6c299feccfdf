"""``lccn-subscriber events list|show|watch|prune``: the stored events, a live view, retention."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING, Any

from subscriber.cli.helpers import (
    EXIT_OK,
    Parents,
    Subparsers,
    cmd_show_event,
    print_json,
    settings_from,
    table,
    when,
    with_store,
)

if TYPE_CHECKING:
    from subscriber.store import PruneCounts, Store

__all__ = ["add_parsers"]

_COLUMNS = (
    "id",
    "source",
    "vnfInstanceId",
    "operation",
    "operationState",
    "notificationStatus",
    "attempt",
    "status",
)


def _cmd_list(args: argparse.Namespace) -> int:
    settings = settings_from(args)

    async def fetch(store: Store) -> list[dict[str, Any]]:
        rows = await store.events.list(
            status=args.status, vnf_instance_id=args.instance, limit=args.limit
        )
        return [r.summary() for r in rows]

    rows = asyncio.run(with_store(settings, fetch))
    if args.format == "json":
        print_json(rows)
    else:
        print(table(rows, _COLUMNS))
    return EXIT_OK


def _cmd_watch(args: argparse.Namespace) -> int:
    from subscriber.watch import format_record, watch

    settings = settings_from(args)

    def emit(record: dict[str, Any]) -> None:
        print(json.dumps(record) if args.format == "json" else format_record(record), flush=True)

    async def follow(store: Store) -> None:
        await watch(
            store,
            emit,
            instance=args.instance,
            interval=args.interval,
            from_start=args.all,
            until_idle=args.until_idle,
        )

    asyncio.run(with_store(settings, follow))
    return EXIT_OK


def _age(text: str) -> float:
    from subscriber.config import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _cmd_prune(args: argparse.Namespace) -> int:
    import time

    settings = settings_from(args)
    before = time.time() - args.older_than

    async def prune(store: Store) -> PruneCounts:
        if args.dry_run:
            return await store.retention.count(before, include_failed=args.include_failed)
        return await store.retention.prune(
            before, include_failed=args.include_failed, batch=settings.retention.batch
        )

    counts = asyncio.run(with_store(settings, prune))
    verb = "would prune" if args.dry_run else "pruned"
    kinds = "settled and failed" if args.include_failed else "settled"
    print(
        f"{verb} {counts.events} events, {counts.jobs} jobs, {counts.steps} steps "
        f"({kinds}, last changed before {when(before)})"
    )
    return EXIT_OK


def add_parsers(subparsers: Subparsers, parents: Parents) -> None:
    """Add ``events list``, ``events show ID``, ``events watch`` and ``events prune``.

    Arguments:
        subparsers: the root parser's subcommands.
        parents: the shared option parsers.
    """
    events = subparsers.add_parser("events", help="stored events").add_subparsers(
        dest="events_command", required=True
    )
    ls = events.add_parser("list", parents=parents.store, help="list events")
    ls.add_argument("--status", help="only events with this status")
    ls.add_argument("--instance", help="only events of this vnfInstanceId")
    ls.add_argument("--limit", type=int, help="at most this many")
    ls.add_argument("--format", choices=("table", "json"), default="table")
    ls.set_defaults(func=_cmd_list)
    show = events.add_parser("show", parents=parents.store, help="one event with its jobs")
    show.add_argument("id", type=int)
    show.set_defaults(func=cmd_show_event)
    live = events.add_parser(
        "watch", parents=parents.store, help="new events and their jobs' steps, live"
    )
    live.add_argument("--instance", help="only events of this vnfInstanceId")
    live.add_argument("--interval", type=float, default=0.5, help="seconds between looks")
    live.add_argument("--all", action="store_true", help="the events already stored too")
    live.add_argument(
        "--until-idle", action="store_true", help="stop once every event seen has settled"
    )
    live.add_argument("--format", choices=("text", "json"), default="text")
    live.set_defaults(func=_cmd_watch)
    prune = events.add_parser(
        "prune",
        parents=parents.store,
        help="delete settled events (and their jobs and steps) older than an age",
    )
    prune.add_argument(
        "--older-than",
        type=_age,
        required=True,
        metavar="AGE",
        help="last changed longer ago than this: 30d, 12h, 15m, 90s",
    )
    prune.add_argument("--dry-run", action="store_true", help="count only, delete nothing")
    prune.add_argument(
        "--include-failed",
        action="store_true",
        help="failed and poison events too (kept by default, for replay)",
    )
    prune.set_defaults(func=_cmd_prune)
