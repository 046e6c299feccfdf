"""The ``lccn-subscriber`` command line.

Errors print one line on stderr (``lccn-subscriber: error: ...``) and exit 2.

Each command group is a module with ``add_parsers(subparsers, parents)``,
listed in :data:`GROUPS` in the order ``--help`` shows them; its commands set
``func`` (parsed args -> exit code). Groups import only
:mod:`subscriber.cli.helpers` (and the service below it), never each other.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from subscriber.cli import config, db, events, handlers, kafka, operate, serve, subscribe
from subscriber.cli.helpers import (
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
    PROG,
    CliError,
    CommandGroup,
    parent_parsers,
)
from subscriber.errors import ConfigError, LccnError, SchemaTooNew
from subscriber.redact import redact_text

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
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on failure, print the traceback too (also with LCCN_LOG__LEVEL=debug)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add_parsers(subparsers, parents)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code.

    Arguments:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        the command's exit code (see :mod:`subscriber.cli.helpers`): 2 after a
        command's one-line error, 3 for a configuration error, 4 when something
        it needs is unreachable or refused it, 130 after Ctrl-C. Every failure
        is one line on stderr, secrets masked; ``--debug`` adds the traceback.
    """
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get("LCCN_LOG__LEVEL", "").lower() == "debug"
    try:
        code: int = args.func(args)
        return code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except CliError as exc:
        return _fail(f"error: {exc.message}", EXIT_ERROR, debug)
    except (ConfigError, SchemaTooNew) as exc:
        return _fail(f"configuration error: {exc.message}", EXIT_CONFIG, debug)
    except LccnError as exc:
        return _fail(f"error: {exc.message}", EXIT_UNAVAILABLE, debug)


def _fail(line: str, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    print(f"{PROG}: {redact_text(line)}", file=sys.stderr)
    return code
