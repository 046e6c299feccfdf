"""Operator commands on failed events: ``failed list|show``, ``replay``, ``audit list``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from subscriber.cli.helpers import (
    EXIT_INPUT,
    EXIT_OK,
    CliError,
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
    from subscriber.store import FailedFilter, Store

__all__ = ["add_parsers"]


def _filter(args: argparse.Namespace) -> FailedFilter:
    from subscriber.failed import parse_time
    from subscriber.store import FailedFilter

    try:
        since = parse_time(args.since) if args.since else None
        until = parse_time(args.until) if args.until else None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return FailedFilter(
        instance=args.instance,
        operation=args.operation,
        state=args.state,
        since=since,
        until=until,
        error_class=args.error_class,
    )


def _add_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--instance", help="only this vnfInstanceId")
    p.add_argument("--operation", help="only this LCM operation (INSTANTIATE, HEAL ...)")
    p.add_argument("--state", help="only this operationState (COMPLETED, FAILED_TEMP ...)")
    p.add_argument("--since", help="received at or after: 2h, 7d, ISO 8601 or epoch seconds")
    p.add_argument("--until", help="received before: same forms as --since")
    p.add_argument("--error-class", help="only jobs that failed with this error class")


# -- failed ----------------------------------------------------------------------

_FAILED_COLUMNS = (
    "id",
    "received",
    "vnfInstanceId",
    "operation",
    "operationState",
    "handler",
    "attempts",
    "errorClass",
    "failedStep",
    "lastError",
)


def _cmd_failed_list(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    flt = _filter(args)

    async def fetch(store: Store) -> list[dict[str, Any]]:
        return [r.as_json() for r in await store.failed.select(flt, limit=args.limit)]

    rows = asyncio.run(with_store(settings, fetch))
    if args.format == "json":
        print_json(rows)
        return EXIT_OK
    for r in rows:
        r["received"] = when(r["receivedAt"])
        err = (r["lastError"] or "").replace("\n", " ")
        r["lastError"] = err if len(err) <= 60 else err[:57] + "..."
    print(table(rows, _FAILED_COLUMNS))
    return EXIT_OK


# -- replay ----------------------------------------------------------------------


def _confirm(count: int, mode: str) -> bool:
    sys.stderr.write(f"Replay {count} event(s) in mode {mode}? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _cmd_replay(args: argparse.Namespace) -> int:
    from handlers import routing_for, services_configured
    from subscriber.replay import (
        Progress,
        actor,
        parse_rate,
        preview,
        request_replays,
        select_events,
    )

    settings = settings_from(args)
    flt = _filter(args)
    if not args.ids and flt.is_empty() and not args.all:
        raise CliError("select events: give ids, a filter (--instance, --since ...) or --all")
    try:
        rate = parse_rate(args.rate) if args.rate else None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    # The routes serve runs (the cluster handlers too), so the preview names its handler.
    routing = routing_for(settings, services_configured(settings))
    who = actor()

    async def run(store: Store) -> int:
        rows, missing = await select_events(store, args.ids, flt, limit=args.limit)
        if missing:
            raise CliError(f"no event with id {', '.join(map(str, missing))}")
        previews = await preview(store, routing, rows, args.mode)
        replayable = [p.event.id for p in previews if p.replayable]
        refused = [p for p in previews if not p.replayable]
        filters = (
            {k: v for k, v in dataclasses.asdict(flt).items() if v and k != "statuses"}
            if not args.ids
            else {}
        )
        if args.dry_run:
            if args.format == "json":
                print_json([p.as_json() for p in previews])
            else:
                print("\n".join(p.as_text() for p in previews) or "(no events selected)")
                print(f"dry run: {len(replayable)} event(s) would be replayed; nothing changed")
            await store.replays.record_audit(
                actor=who,
                action="replay",
                mode=args.mode,
                dry_run=True,
                event_ids=replayable,
                detail={"filters": filters, "refused": [p.event.id for p in refused]},
            )
            return EXIT_OK
        for p in refused:
            print(f"event {p.event.id} skipped: {p.reason}", file=sys.stderr)
        if not replayable:
            raise CliError("nothing to replay")
        if not args.yes:
            if not sys.stdin.isatty():
                raise CliError(
                    f"refusing to replay {len(replayable)} event(s) without --yes "
                    "(stdin is not a terminal)"
                )
            if not _confirm(len(replayable), args.mode):
                print("not replayed", file=sys.stderr)
                return EXIT_INPUT
        audit_id = await store.replays.record_audit(
            actor=who,
            action="replay",
            mode=args.mode,
            dry_run=False,
            event_ids=replayable,
            detail={"filters": filters, "rate": args.rate, "state": "started"},
        )
        progress = Progress(len(replayable)) if len(replayable) > 1 else None
        queued: list[int] = []
        try:
            queued = await request_replays(
                store, replayable, args.mode, rate=rate, progress=progress
            )
        finally:
            # Shielded: an interrupted batch still says how far it got.
            await asyncio.shield(
                store.replays.update_audit(
                    audit_id,
                    {
                        "filters": filters,
                        "rate": args.rate,
                        "state": "done" if len(queued) == len(replayable) else "partial",
                        "queued": queued,
                    },
                )
            )
        lost = sorted(set(replayable) - set(queued))
        print(
            f"queued {len(queued)} event(s) for replay (mode {args.mode}, audit {audit_id}); "
            "a running serve picks them up at its next rescan, otherwise the next serve runs them"
        )
        if lost:
            print(
                f"not queued (taken by a lane meanwhile): {', '.join(map(str, lost))}",
                file=sys.stderr,
            )
        return EXIT_OK

    return asyncio.run(with_store(settings, run))


# -- audit -----------------------------------------------------------------------


def _cmd_audit_list(args: argparse.Namespace) -> int:
    settings = settings_from(args)

    async def fetch(store: Store) -> list[dict[str, Any]]:
        return [r.as_json() for r in await store.replays.audit_list(limit=args.limit)]

    rows = asyncio.run(with_store(settings, fetch))
    if args.format == "json":
        print_json(rows)
        return EXIT_OK
    for r in rows:
        r["when"] = when(r["at"])
        ids = r["eventIds"]
        r["events"] = ",".join(map(str, ids[:8])) + (f" (+{len(ids) - 8})" if len(ids) > 8 else "")
        r["dryRun"] = "yes" if r["dryRun"] else "no"
    print(table(rows, ("id", "when", "actor", "action", "mode", "dryRun", "events")))
    return EXIT_OK


# -- parsers ---------------------------------------------------------------------


def add_parsers(subparsers: Subparsers, parents: Parents) -> None:
    """Add ``failed list|show``, ``replay`` and ``audit list``.

    Arguments:
        subparsers: the root parser's subcommands.
        parents: the shared option parsers.
    """
    failed = subparsers.add_parser("failed", help="events whose job failed").add_subparsers(
        dest="failed_command", required=True
    )
    ls = failed.add_parser("list", parents=parents.store, help="list failed events")
    _add_filters(ls)
    ls.add_argument("--limit", type=int, help="at most this many")
    ls.add_argument("--format", choices=("table", "json"), default="table")
    ls.set_defaults(func=_cmd_failed_list)
    show = failed.add_parser(
        "show", parents=parents.store, help="one event: body, jobs, steps, errors, output tails"
    )
    show.add_argument("id", type=int)
    show.set_defaults(func=cmd_show_event)

    rp = subparsers.add_parser(
        "replay",
        parents=parents.store,
        help="run finished events again through their lanes",
        description="Select by ids, or by filters over failed events.",
    )
    rp.add_argument("ids", nargs="*", type=int, help="event ids (any finished status)")
    _add_filters(rp)
    rp.add_argument("--all", action="store_true", help="every failed event")
    rp.add_argument("--limit", type=int, help="at most this many (filters)")
    rp.add_argument(
        "--mode",
        choices=("resume", "anew"),
        default="resume",
        help="resume: continue at the first step not done (default); anew: from step one",
    )
    rp.add_argument("--dry-run", action="store_true", help="show what would run; change nothing")
    rp.add_argument("--rate", help="at most this many per time unit: 5/s, 30/m")
    rp.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    rp.add_argument("--format", choices=("text", "json"), default="text", help="dry-run output")
    rp.set_defaults(func=_cmd_replay)

    audit = subparsers.add_parser("audit", help="the operator audit trail").add_subparsers(
        dest="audit_command", required=True
    )
    al = audit.add_parser("list", parents=parents.store, help="replays and dry runs, newest first")
    al.add_argument("--limit", type=int, help="at most this many")
    al.add_argument("--format", choices=("table", "json"), default="table")
    al.set_defaults(func=_cmd_audit_list)
