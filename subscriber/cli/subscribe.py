"""``lccn-subscriber subscribe`` and ``lccn-subscriber subscriptions list|delete ID``.

Each command gets the effective settings and prints one line per result (or
JSON); an error of the Tacker client becomes one line on stderr (exit 2).
``subscribe`` opens the store too: the callback credentials it generates for
the subscription are recorded there (verifiers only), where ``serve`` reads them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from subscriber.cli.helpers import (
    EXIT_OK,
    CliError,
    Parents,
    Subparsers,
    settings_from,
    with_store,
)
from subscriber.config import Settings
from subscriber.errors import ConfigError
from subscriber.tacker.client import TackerClient
from subscriber.tacker.subscriptions import ensure_subscription

__all__ = ["add_parsers", "run_tacker_command"]


def add_parsers(subparsers: Subparsers, parents: Parents) -> None:
    """Add ``subscribe`` and ``subscriptions list|delete`` (``tacker_command`` says which).

    Arguments:
        subparsers: the root parser's subcommands.
        parents: the shared option parsers (each command takes ``--config``).
    """
    common = [parents.config]
    sub = subparsers.add_parser(
        "subscribe",
        parents=parents.store,
        help="create our LCCN subscription in Tacker (with callback credentials serve "
        "accepts), or verify it exists (idempotent)",
    )
    sub.add_argument("--callback-uri", help="override tacker.callback_uri")
    sub.set_defaults(tacker_command="subscribe", func=_cmd_tacker)
    subs = subparsers.add_parser("subscriptions", help="Tacker's LCCN subscriptions")
    cmds = subs.add_subparsers(dest="subscriptions_command", required=True)
    ls = cmds.add_parser("list", parents=common, help="list subscriptions")
    ls.add_argument("--format", choices=("table", "json"), default="table")
    ls.set_defaults(tacker_command="list")
    rm = cmds.add_parser("delete", parents=common, help="delete one subscription")
    rm.add_argument("id")
    rm.set_defaults(tacker_command="delete")
    subs.set_defaults(func=_cmd_tacker)


def _cmd_tacker(args: argparse.Namespace) -> int:
    # Tacker's and Keystone's errors reach the root as they are: one line, exit 4.
    return asyncio.run(run_tacker_command(args, settings_from(args)))


async def _with_client(settings: Settings, fn: Callable[[TackerClient], Awaitable[Any]]) -> Any:
    if not settings.tacker.configured:
        raise ConfigError(
            "no Tacker configured: set tacker.endpoint or a Keystone tacker.auth_type"
        )
    async with TackerClient(settings.tacker) as client:
        return await fn(client)


async def run_tacker_command(args: argparse.Namespace, settings: Settings) -> int:
    """Run the parsed command; raises LccnError for the CLI to print."""
    command = args.tacker_command
    if command == "subscribe":
        if args.callback_uri:
            settings = settings.model_copy(
                update={
                    "tacker": settings.tacker.model_copy(update={"callback_uri": args.callback_uri})
                }
            )
        result = await _with_client(
            settings,
            lambda c: with_store(
                settings, lambda s: ensure_subscription(c, settings, s.credentials)
            ),
        )
        sub = result.subscription
        what = "created" if result.created else "exists"
        notes = [f"authentication: {result.auth}"]
        if result.filter_differs:
            notes.append("its filter differs from the configured one")
        if result.replaced:
            notes.append(f"replaced {', '.join(result.replaced)}: authentication not confirmed")
        print(f"subscription {sub.get('id')} {what}: {sub.get('callbackUri')} ({'; '.join(notes)})")
        return EXIT_OK
    if command == "list":
        subs: list[dict[str, Any]] = await _with_client(settings, lambda c: c.list_subscriptions())
        if args.format == "json":
            print(json.dumps(subs, indent=2))
        elif not subs:
            print("(none)")
        else:
            for s in subs:
                flt = json.dumps(s.get("filter") or {}, separators=(",", ":"))
                print(f"{s.get('id')}  {s.get('callbackUri')}  {flt}")
        return EXIT_OK
    if command == "delete":
        deleted = await _with_client(settings, lambda c: c.delete_subscription(args.id))
        if not deleted:
            raise CliError(f"no subscription {args.id} in Tacker")
        print(f"subscription {args.id} deleted")
        return EXIT_OK
    raise CliError(f"unknown command {command!r}")
