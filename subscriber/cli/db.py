"""``lccn-subscriber db upgrade``: create or migrate the store."""

from __future__ import annotations

import argparse
import asyncio

from subscriber.cli.helpers import EXIT_OK, Parents, Subparsers, settings_from, with_store

__all__ = ["add_parsers"]


def _cmd_upgrade(args: argparse.Namespace) -> int:
    from subscriber.redact import redact_url
    from subscriber.store import Store
    from subscriber.store.migrate import HEAD_REVISION

    settings = settings_from(args)

    async def noop(store: Store) -> None:
        return None

    # Opening the store migrates it.
    asyncio.run(with_store(settings, noop))
    print(f"{redact_url(settings.database.resolved_url())} is at revision {HEAD_REVISION}")
    return EXIT_OK


def add_parsers(subparsers: Subparsers, parents: Parents) -> None:
    """Add ``db upgrade``.

    Arguments:
        subparsers: the root parser's subcommands.
        parents: the shared option parsers.
    """
    db = subparsers.add_parser("db", help="the store's schema").add_subparsers(
        dest="db_command", required=True
    )
    up = db.add_parser("upgrade", parents=parents.store, help="create or migrate the store")
    up.set_defaults(func=_cmd_upgrade)
