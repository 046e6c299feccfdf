"""``lccn-subscriber events list|show``: the stored events."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

from subscriber.cli.helpers import (
    EXIT_OK,
    Parents,
    Subparsers,
    cmd_show_event,
    print_json,
    settings_from,
    table,
    with_store,
)

if TYPE_CHECKING:
    from subscriber.store import Store

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


def add_parsers(subparsers: Subparsers, parents: Parents) -> None:
    """Add ``events list`` and ``events show ID``.

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
