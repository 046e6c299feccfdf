"""``lccn-subscriber config show``: the effective configuration, secrets masked."""

from __future__ import annotations

import argparse

from subscriber.cli.helpers import EXIT_OK, Parents, Subparsers, print_json, settings_from
from subscriber.config import masked

__all__ = ["add_parsers"]


def _cmd_show(args: argparse.Namespace) -> int:
    print_json(masked(settings_from(args)))
    return EXIT_OK


def add_parsers(subparsers: Subparsers, parents: Parents) -> None:
    """Add ``config show``.

    Arguments:
        subparsers: the root parser's subcommands.
        parents: the shared option parsers.
    """
    cfg = subparsers.add_parser("config", help="configuration").add_subparsers(
        dest="config_command", required=True
    )
    show = cfg.add_parser("show", parents=parents.store, help="effective config, secrets masked")
    show.set_defaults(func=_cmd_show)
