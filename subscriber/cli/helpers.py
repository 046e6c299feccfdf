"""What every command group shares: options, settings, the store, output, errors, exit codes.

This module imports no command group; the groups and :mod:`subscriber.cli.root`
import it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

from pydantic import ValidationError
from pydantic_settings import SettingsError

from subscriber.config import Settings, load_settings
from subscriber.errors import CliError, ConfigError, ConfigFileError

if TYPE_CHECKING:
    from subscriber.store import Store

__all__ = [
    "EXIT_CONFIG",
    "EXIT_ERROR",
    "EXIT_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "PROG",
    "CliError",
    "CommandGroup",
    "Parents",
    "Subparsers",
    "cmd_show_event",
    "event_detail",
    "parent_parsers",
    "print_json",
    "settings_from",
    "table",
    "when",
    "with_store",
]

PROG = "lccn-subscriber"

# Exit codes, the same for every command.
EXIT_OK = 0
EXIT_INPUT = 1  # bad input, nothing done (kafka publish); the operator said no (replay)
EXIT_ERROR = 2  # a CliError or a usage error (argparse); no Kafka broker answered
EXIT_CONFIG = 3  # the configuration is wrong or lacks a section the command needs
EXIT_UNAVAILABLE = 4  # something needed is unreachable or refused us: store, port, Tacker, broker
EXIT_INTERRUPTED = 130  # Ctrl-C

# What ``ArgumentParser.add_subparsers()`` returns.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Parents:
    """The shared option parsers a command lists in ``parents=``.

    Attributes:
        config: ``--config`` (every command).
        database: ``--database`` (commands that open the store).
    """

    config: argparse.ArgumentParser
    database: argparse.ArgumentParser

    @property
    def store(self) -> list[argparse.ArgumentParser]:
        """``--config`` and ``--database``: for commands that open the store."""
        return [self.config, self.database]


class CommandGroup(Protocol):
    """A module of commands: :mod:`subscriber.cli.root` lists it in ``GROUPS``."""

    def add_parsers(self, subparsers: Subparsers, parents: Parents) -> None:
        """Add the group's commands; each sets ``func`` (parsed args -> exit code).

        Arguments:
            subparsers: the root parser's subcommands.
            parents: the shared option parsers to list in ``parents=``.
        """
        ...


def parent_parsers() -> Parents:
    """New ``--config`` and ``--database`` parent parsers (one set per command tree)."""
    config = argparse.ArgumentParser(add_help=False)
    config.add_argument("--config", help="YAML or TOML config file (default $LCCN_CONFIG)")
    database = argparse.ArgumentParser(add_help=False)
    database.add_argument("--database", help="SQLAlchemy URL of the store")
    return Parents(config, database)


def settings_from(args: argparse.Namespace) -> Settings:
    """The effective settings: the config file, the environment, then the command's flags.

    Raises:
        ConfigError: the file cannot be read or a value is invalid (the first one is named).
    """
    overrides: dict[str, dict[str, Any]] = {
        "http": {
            "host": getattr(args, "host", None),
            "port": getattr(args, "port", None),
        },
        "database": {"url": getattr(args, "database", None)},
    }
    log_format = getattr(args, "log_format", None)
    if log_format:
        overrides["log"] = {"format": log_format}
    try:
        return load_settings(args.config, overrides)
    except ConfigFileError:
        raise
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "")).removeprefix("Value error, ").removeprefix(f"{loc}: ")
        raise ConfigError(f"{loc}: {msg}") from None
    except SettingsError as exc:  # a value the environment source cannot decode as JSON
        found = re.search(r'field "([^"]+)" from source "([^"]+)"', str(exc))
        source = (
            {"EnvSettingsSource": "the environment"}.get(found.group(2), found.group(2))
            if found
            else ""
        )
        where = f"{found.group(1)} (from {source})" if found else "a setting"
        raise ConfigError(f"{where}: cannot parse the value: a JSON value is expected") from None


async def with_store(settings: Settings, fn: Callable[[Store], Awaitable[T]]) -> T:
    """Open the store (migrating it), run ``fn`` with it, close it.

    Raises:
        StoreUnavailable: the database cannot be reached or refused us.
        SchemaTooNew: a newer lccn-subscriber migrated it.
    """
    from subscriber.store import Store

    store = Store(settings.database)
    await store.start()
    try:
        return await fn(store)
    finally:
        await store.stop()


def table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as a left-aligned text table under a header of ``columns`` (``(none)`` if empty)."""
    if not rows:
        return "(none)"
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def print_json(data: Any) -> None:
    """``data`` on stdout as indented JSON."""
    print(json.dumps(data, indent=2))


def when(ts: float | None) -> str:
    """Epoch seconds as ``2026-11-22T10:00:00Z`` (empty for None)."""
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def event_detail(store: Store, event_id: int) -> dict[str, Any] | None:
    """An event with every job and step (errors and output tails redacted as stored).

    Returns:
        the JSON shape of ``events show`` and ``failed show``; None for an unknown id.
    """
    row = await store.events.get(event_id)
    if row is None:
        return None
    out: dict[str, Any] = row.summary()
    out.update(
        dedupKey=row.dedup_key,
        notificationId=row.notification_id,
        apiVersion=row.api_version,
        meta=row.meta_json(),
        body=row.body_json(),
        jobs=[],
    )
    for job in await store.jobs.for_event(row.id):
        steps = await store.jobs.steps(job.id)
        out["jobs"].append(
            {
                "id": job.id,
                "handler": job.handler,
                "mode": job.mode,
                "status": job.status,
                "attempts": job.attempts,
                "createdAt": job.created_at,
                "nextAttemptAt": job.next_attempt_at,
                "errorClass": job.error_class,
                "lastError": job.last_error,
                "steps": [
                    {
                        "name": s.name,
                        "status": s.status,
                        "attempts": s.attempts,
                        "idempotent": s.idempotent,
                        "startedAt": s.started_at,
                        "finishedAt": s.finished_at,
                        "error": s.error,
                        "output": s.output,
                        "result": s.result_json(),
                    }
                    for s in steps
                ],
            }
        )
    return out


def cmd_show_event(args: argparse.Namespace) -> int:
    """``events show ID`` and ``failed show ID``: one event, its jobs and steps, as JSON.

    Raises:
        CliError: no event with that id.
    """
    settings = settings_from(args)
    data = asyncio.run(with_store(settings, lambda store: event_detail(store, args.id)))
    if data is None:
        raise CliError(f"no event with id {args.id}")
    print_json(data)
    return EXIT_OK
