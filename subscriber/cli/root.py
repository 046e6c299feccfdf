"""The ``lccn-subscriber`` command line.

Errors print one line on stderr (``lccn-subscriber: error: ...``) and exit 2.

Each command group is a module with ``add_parsers(subparsers, parents)``,
listed in :data:`GROUPS` in the order ``--help`` shows them; its commands set
``func`` (parsed args -> exit code). Groups import only
:mod:`subscriber.cli.helpers` (and the service below it), never each other.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from subscriber.cli import config, db, events, handlers, kafka, operate, serve, subscribe
from subscriber.cli.helpers import (
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    PROG,
    CliError,
    CommandGroup,
    parent_parsers,
)
from subscriber.errors import ConfigError

__all__ = ["GROUPS", "build_parser", "main"]

# serve; events list/show; db upgrade; config show; failed list/show, replay,
# audit list; kafka status/publish; subscribe, subscriptions list/delete; handlers list.
GROUPS: tuple[CommandGroup, ...] = (
    serve,
    events,
    db,
    config,
    operate,
    kafka,
    subscribe,
    handlers,
)


def build_parser() -> argparse.ArgumentParser:
    """The whole argparse tree: every group of :data:`GROUPS` adds its commands."""
    parents = parent_parsers()
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add_parsers(subparsers, parents)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code.

    Arguments:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        the command's exit code; 2 after a one-line error, 130 after Ctrl-C.
    """
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except CliError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except ConfigError as exc:
        print(f"{PROG}: configuration error: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
