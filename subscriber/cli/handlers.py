"""``lccn-subscriber handlers list``: the routing table serve would use, with each plan's steps."""

from __future__ import annotations

import argparse

from subscriber.cli.helpers import (
    EXIT_OK,
    Parents,
    Subparsers,
    print_json,
    settings_from,
    table,
)

__all__ = ["add_parsers"]


def _cmd_list(args: argparse.Namespace) -> int:
    from handlers import routing_for, services_configured  # the CLI is above the handlers

    settings = settings_from(args)
    routing = routing_for(settings, services_configured(settings))
    rows = [r.as_json() for r in routing.table()]
    if args.format == "json":
        print_json(rows)
    else:
        shown = [{**r, "steps": ", ".join(r["steps"])} for r in rows]
        print(table(shown, ["operation", "state", "handler", "steps"]))
    return EXIT_OK


def add_parsers(subparsers: Subparsers, parents: Parents) -> None:
    """Add ``handlers list``.

    Arguments:
        subparsers: the root parser's subcommands.
        parents: the shared option parsers.
    """
    group = subparsers.add_parser("handlers", help="which handler serves what").add_subparsers(
        dest="handlers_command", required=True
    )
    show = group.add_parser(
        "list",
        parents=[parents.config],
        help="the routing table: operation, state, handler and its steps",
    )
    show.add_argument("--format", choices=("table", "json"), default="table")
    show.set_defaults(func=_cmd_list)
