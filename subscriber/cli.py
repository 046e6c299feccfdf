"""The ``lccn-subscriber`` command line.

Errors print one line on stderr (``lccn-subscriber: error: ...``) and exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from subscriber.config import Settings, load_settings, masked
from subscriber.errors import ConfigFileError
from subscriber.kafka_cli import add_kafka_parser
from subscriber.operate_cli import add_operate_parsers
from subscriber.tacker_cli import add_tacker_parsers

__all__ = ["main"]

PROG = "lccn-subscriber"


class CliError(Exception):
    """A one-line error for the operator."""


def _settings(args: argparse.Namespace) -> Settings:
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
    except ConfigFileError as exc:
        raise CliError(str(exc)) from None
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        raise CliError(f"invalid configuration: {loc}: {err.get('msg')}") from None


# -- serve ---------------------------------------------------------------------


def _cmd_serve(args: argparse.Namespace) -> int:
    from subscriber.logs import setup_logging
    from subscriber.service import Service

    settings = _settings(args)
    setup_logging(settings.log.format, settings.log.level)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await Service(settings).serve_forever(stop)

    asyncio.run(run())
    return 0


# -- events ----------------------------------------------------------------------


def _table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


async def _with_store(settings: Settings, fn: Any) -> Any:
    from subscriber.store import Store

    store = Store(settings.database)
    try:
        await store.start()
    except Exception as exc:
        raise CliError(f"cannot open the store: {type(exc).__name__}: {exc}") from None
    try:
        return await fn(store)
    finally:
        await store.stop()


def _cmd_events_list(args: argparse.Namespace) -> int:
    settings = _settings(args)

    async def fetch(store: Any) -> list[dict[str, Any]]:
        rows = await store.events.list(
            status=args.status, vnf_instance_id=args.instance, limit=args.limit
        )
        return [r.summary() for r in rows]

    rows = asyncio.run(_with_store(settings, fetch))
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        cols = (
            "id",
            "source",
            "vnfInstanceId",
            "operation",
            "operationState",
            "notificationStatus",
            "attempt",
            "status",
        )
        print(_table(rows, cols))
    return 0


def _cmd_events_show(args: argparse.Namespace) -> int:
    from subscriber.operate_cli import event_detail

    settings = _settings(args)
    data: dict[str, Any] | None = asyncio.run(
        _with_store(settings, lambda store: event_detail(store, args.id))
    )
    if data is None:
        raise CliError(f"no event with id {args.id}")
    print(json.dumps(data, indent=2))
    return 0


# -- db / config -----------------------------------------------------------------


def _cmd_db_upgrade(args: argparse.Namespace) -> int:
    from subscriber.redact import redact_url
    from subscriber.store import Store
    from subscriber.store.migrate import head_revision

    settings = _settings(args)

    async def noop(store: Store) -> None:
        return None

    asyncio.run(_with_store(settings, noop))
    print(f"{redact_url(settings.database.resolved_url())} is at revision {head_revision()}")
    return 0


def _cmd_config_show(args: argparse.Namespace) -> int:
    print(json.dumps(masked(_settings(args)), indent=2))
    return 0


# -- kafka ---------------------------------------------------------------------


def _cmd_kafka(args: argparse.Namespace) -> int:
    from subscriber.kafka_cli import run_kafka_command

    return asyncio.run(run_kafka_command(args, _settings(args)))


# -- tacker --------------------------------------------------------------------


def _cmd_tacker(args: argparse.Namespace) -> int:
    from subscriber.errors import LccnError
    from subscriber.tacker_cli import run_tacker_command

    try:
        return asyncio.run(run_tacker_command(args, _settings(args)))
    except LccnError as exc:
        raise CliError(exc.message) from None


# -- parser ----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="YAML or TOML config file (default $LCCN_CONFIG)")
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument("--database", help="SQLAlchemy URL of the store")

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", parents=[common, db], help="run the service")
    serve.add_argument("--host", help="listen address")
    serve.add_argument("--port", type=int, help="listen port")
    serve.add_argument("--log-format", choices=("json", "text"))
    serve.set_defaults(func=_cmd_serve)

    events = sub.add_parser("events", help="stored events").add_subparsers(
        dest="events_command", required=True
    )
    ls = events.add_parser("list", parents=[common, db], help="list events")
    ls.add_argument("--status", help="only events with this status")
    ls.add_argument("--instance", help="only events of this vnfInstanceId")
    ls.add_argument("--limit", type=int, help="at most this many")
    ls.add_argument("--format", choices=("table", "json"), default="table")
    ls.set_defaults(func=_cmd_events_list)
    show = events.add_parser("show", parents=[common, db], help="one event with its jobs")
    show.add_argument("id", type=int)
    show.set_defaults(func=_cmd_events_show)

    dbp = sub.add_parser("db", help="the store's schema").add_subparsers(
        dest="db_command", required=True
    )
    up = dbp.add_parser("upgrade", parents=[common, db], help="create or migrate the store")
    up.set_defaults(func=_cmd_db_upgrade)

    cfg = sub.add_parser("config", help="configuration").add_subparsers(
        dest="config_command", required=True
    )
    cshow = cfg.add_parser("show", parents=[common, db], help="effective config, secrets masked")
    cshow.set_defaults(func=_cmd_config_show)

    # failed list/show, replay, audit list
    add_operate_parsers(sub, [common, db])
    kafka = add_kafka_parser(sub, parents=[common])
    kafka.set_defaults(func=_cmd_kafka)
    add_tacker_parsers(sub, [common])
    for name in ("subscribe", "subscriptions"):
        sub.choices[name].set_defaults(func=_cmd_tacker)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except CliError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    # Run the imported module, not this __main__ copy: commands in other
    # modules raise subscriber.cli.CliError, which must be the class caught here.
    from subscriber.cli import main as _main

    sys.exit(_main())
