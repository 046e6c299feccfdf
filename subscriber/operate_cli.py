"""Operator commands: ``failed list/show``, ``replay``, ``audit list``.

Kept out of :mod:`subscriber.cli` so the main parser only gains one call;
the shared helpers (settings, store, table, one-line errors) come from there.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["add_operate_parsers"]


def _when(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _filter(args: argparse.Namespace) -> Any:
    from subscriber.cli import CliError
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


def _cmd_failed_list(args: argparse.Namespace) -> int:
    from subscriber.cli import _settings, _table, _with_store

    settings = _settings(args)
    flt = _filter(args)

    async def fetch(store: Any) -> list[dict[str, Any]]:
        rows = await store.failed.select(flt, limit=args.limit)
        return [r.as_json() for r in rows]

    rows = asyncio.run(_with_store(settings, fetch))
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        r["received"] = _when(r["receivedAt"])
        err = (r["lastError"] or "").replace("\n", " ")
        r["lastError"] = err if len(err) <= 60 else err[:57] + "..."
    cols = (
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
    print(_table(rows, cols))
    return 0


async def event_detail(store: Any, event_id: int) -> dict[str, Any] | None:
    """An event with every job and step (errors and output tails redacted as stored)."""
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
                        "error": s.error,
                        "output": s.output,
                        "result": s.result_json(),
                    }
                    for s in steps
                ],
            }
        )
    return out


def _cmd_failed_show(args: argparse.Namespace) -> int:
    from subscriber.cli import CliError, _settings, _with_store

    settings = _settings(args)
    data = asyncio.run(_with_store(settings, lambda store: event_detail(store, args.id)))
    if data is None:
        raise CliError(f"no event with id {args.id}")
    print(json.dumps(data, indent=2))
    return 0


# -- replay ----------------------------------------------------------------------


def _confirm(count: int, mode: str) -> bool:
    sys.stderr.write(f"Replay {count} event(s) in mode {mode}? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _cmd_replay(args: argparse.Namespace) -> int:
    from handlers import default_registry
    from subscriber.cli import CliError, _settings, _with_store
    from subscriber.replay import (
        Progress,
        actor,
        parse_rate,
        preview,
        request_replays,
        select_events,
    )

    settings = _settings(args)
    flt = _filter(args)
    if not args.ids and flt.is_empty() and not args.all:
        raise CliError("select events: give ids, a filter (--instance, --since ...) or --all")
    try:
        rate = parse_rate(args.rate) if args.rate else None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    registry = default_registry(settings.handlers.modules)
    who = actor()

    async def run(store: Any) -> int:
        rows, missing = await select_events(store, args.ids, flt, limit=args.limit)
        if missing:
            raise CliError(f"no event with id {', '.join(map(str, missing))}")
        previews = await preview(store, registry, rows, args.mode)
        replayable = [p.event.id for p in previews if p.replayable]
        refused = [p for p in previews if not p.replayable]
        filters = (
            {k: v for k, v in dataclasses.asdict(flt).items() if v and k != "statuses"}
            if not args.ids
            else {}
        )
        if args.dry_run:
            if args.format == "json":
                print(json.dumps([p.as_json() for p in previews], indent=2))
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
            return 0
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
                return 1
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
        return 0

    code: int = asyncio.run(_with_store(settings, run))
    return code


# -- audit -----------------------------------------------------------------------


def _cmd_audit_list(args: argparse.Namespace) -> int:
    from subscriber.cli import _settings, _table, _with_store

    settings = _settings(args)

    async def fetch(store: Any) -> list[dict[str, Any]]:
        return [r.as_json() for r in await store.replays.audit_list(limit=args.limit)]

    rows = asyncio.run(_with_store(settings, fetch))
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        r["when"] = _when(r["at"])
        ids = r["eventIds"]
        r["events"] = ",".join(map(str, ids[:8])) + (f" (+{len(ids) - 8})" if len(ids) > 8 else "")
        r["dryRun"] = "yes" if r["dryRun"] else "no"
    print(_table(rows, ("id", "when", "actor", "action", "mode", "dryRun", "events")))
    return 0


# -- parser ----------------------------------------------------------------------


def add_operate_parsers(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``failed``, ``replay`` and ``audit`` to the main parser's subcommands."""
    failed = sub.add_parser("failed", help="events whose job failed").add_subparsers(
        dest="failed_command", required=True
    )
    ls = failed.add_parser("list", parents=parents, help="list failed events")
    _add_filters(ls)
    ls.add_argument("--limit", type=int, help="at most this many")
    ls.add_argument("--format", choices=("table", "json"), default="table")
    ls.set_defaults(func=_cmd_failed_list)
    show = failed.add_parser(
        "show", parents=parents, help="one event: body, jobs, steps, errors, output tails"
    )
    show.add_argument("id", type=int)
    show.set_defaults(func=_cmd_failed_show)

    rp = sub.add_parser(
        "replay",
        parents=parents,
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

    audit = sub.add_parser("audit", help="the operator audit trail").add_subparsers(
        dest="audit_command", required=True
    )
    al = audit.add_parser("list", parents=parents, help="replays and dry runs, newest first")
    al.add_argument("--limit", type=int, help="at most this many")
    al.add_argument("--format", choices=("table", "json"), default="table")
    al.set_defaults(func=_cmd_audit_list)
