"""Replaying finished events: selection, dry-run previews, paced requests, audit.

A replay only writes to the store (event back to ``pending`` with a
``replay_mode``; see :mod:`subscriber.store.replays`). The lanes do the rest,
so a replayed event never runs beside a live event of the same VNF instance,
and it does not matter whether a ``serve`` is running: a running one finds the
event at its next rescan (``dispatch.rescan_interval``), otherwise the next
``serve`` runs it.

Modes:

* ``resume`` (default): a new job inheriting the last job's done steps, so it
  continues at the first step not done (a failed non-idempotent step runs
  again: the operator decided that it is safe).
* ``anew``: a new job from step one (the VMs were rebuilt).
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from schemas import NotificationParseError, parse_notification
from subscriber.kernel import RoutingTable
from subscriber.redact import redact_text
from subscriber.store import EventRow, FailedFilter, ReplayMode, StepStatus, Store
from subscriber.store.replays import REPLAYABLE

__all__ = [
    "Progress",
    "ReplayPreview",
    "actor",
    "parse_rate",
    "preview",
    "request_replays",
    "select_events",
]

log = logging.getLogger(__name__)


def actor() -> str:
    """Who runs this: the OS user (``uid:N`` when it has no name)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid:{os.getuid()}"


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:/\s*([smh]))?\s*$")


def parse_rate(text: str) -> float:
    """Events per second from ``5/s``, ``30/m``, ``100/h`` or a bare number (per second).

    Raises:
        ValueError: not a positive rate.
    """
    m = _RATE.match(text)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"not a rate: {text!r} (use e.g. 5/s, 30/m)")
    per = {"s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2) or "s"]
    return float(m.group(1)) / per


async def select_events(
    store: Store, ids: Sequence[int], flt: FailedFilter, *, limit: int | None = None
) -> tuple[list[EventRow], list[int]]:
    """The events to replay: ``ids`` if given, else the failed events matching ``flt``.

    Returns:
        the events found (in id order) and the ids that do not exist.
    """
    if ids:
        wanted = sorted(set(ids))
    else:
        wanted = [f.event_id for f in await store.failed.select(flt, limit=limit)]
    got = await store.events.get_many(wanted)
    missing = sorted(set(wanted) - {e.id for e in got})
    return got, missing


@dataclass(slots=True)
class ReplayPreview:
    """What replaying one event would do (``--dry-run``), computed without writing."""

    event: EventRow
    mode: str
    replayable: bool
    reason: str = ""
    handler: str | None = None
    plan: list[str] | None = None
    plan_error: str | None = None
    last_job_id: int | None = None
    inherited: list[str] = field(default_factory=list)
    later_op_occs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def would_run(self) -> list[str] | None:
        if self.plan is None:
            return None
        return [s for s in self.plan if s not in self.inherited]

    def as_json(self) -> dict[str, Any]:
        return {
            "event": self.event.summary(),
            "mode": self.mode,
            "replayable": self.replayable,
            "reason": self.reason or None,
            "handler": self.handler,
            "plan": self.plan,
            "planError": self.plan_error,
            "lastJobId": self.last_job_id,
            "skippedDone": self.inherited,
            "wouldRun": self.would_run,
            "instanceMovedOn": bool(self.later_op_occs),
            "laterOpOccs": self.later_op_occs,
        }

    def as_text(self) -> str:
        e = self.event
        lines = [
            f"event {e.id}: {e.operation or e.notification_type} {e.operation_state or ''} "
            f"instance {e.vnf_instance_id} op-occ {e.vnf_lcm_op_occ_id or '-'} "
            f"(status {e.status})".replace("  ", " ")
        ]
        if not self.replayable:
            lines.append(f"  not replayable: {self.reason}")
            return "\n".join(lines)
        lines.append(f"  handler: {self.handler or '(none: would be ignored)'}  mode: {self.mode}")
        if self.plan is not None:
            lines.append(f"  plan: {', '.join(self.plan) or '(empty)'}")
        else:
            lines.append(f"  plan: unavailable ({self.plan_error})")
        lines.append(f"  already done, would be skipped: {', '.join(self.inherited) or '(none)'}")
        if self.would_run is not None:
            lines.append(f"  would run: {', '.join(self.would_run) or '(nothing)'}")
        if self.reason:
            lines.append(f"  note: {self.reason}")
        if self.later_op_occs:
            later = "; ".join(
                f"{o['vnfLcmOpOccId']} ({o['operation']} {o['operationState']}, "
                f"event {o['eventId']})"
                for o in self.later_op_occs
            )
            lines.append(f"  instance has moved on since: {later}")
        else:
            lines.append("  instance has not moved on (no later op-occ stored)")
        return "\n".join(lines)


async def preview(
    store: Store, routing: RoutingTable, rows: Sequence[EventRow], mode: str
) -> list[ReplayPreview]:
    """What a replay of each event would do; reads only.

    The plan comes from the handler itself (plans are pure); steps whose
    number depends on an earlier step's result show as their pattern
    (``join-master-<node>``).
    """
    out: list[ReplayPreview] = []
    for event in rows:
        p = ReplayPreview(event, mode, replayable=event.status in REPLAYABLE)
        if not p.replayable:
            if event.status in ("pending", "running", "retry"):
                p.reason = f"status {event.status}: it belongs to its lane"
            elif event.status == "rejected":
                p.reason = (
                    "status rejected: Tacker contradicted the notification "
                    f"({event.status_detail or 'see events show'}); a true one is a new event"
                )
            else:
                p.reason = f"status {event.status} cannot be replayed"
            out.append(p)
            continue
        history = await store.replays.history(event)
        last = history.last_job
        p.later_op_occs = [
            {
                "vnfLcmOpOccId": o.op_occ_id,
                "operation": o.operation,
                "operationState": o.operation_state,
                "eventId": o.event_id,
            }
            for o in history.later_op_occs
        ]
        try:
            notification = parse_notification(event.body)
        except NotificationParseError as exc:
            p.replayable, p.reason = False, f"stored body does not parse: {exc.detail}"
            out.append(p)
            continue
        handler = routing.route(notification)
        p.handler = handler.name if handler is not None else None
        p.last_job_id = last.id if last is not None else None
        if mode == ReplayMode.RESUME and last is not None:
            if handler is not None and last.handler == handler.name:
                p.inherited = [
                    r.name
                    for r in history.last_steps
                    if r.status in (StepStatus.DONE, StepStatus.SKIPPED)
                ]
            else:
                p.reason = f"the last job ran handler {last.handler!r}: nothing is inherited"
        if handler is not None:
            try:
                p.plan = handler.plan(notification).outline()
            except Exception as exc:
                p.plan_error = redact_text(f"{type(exc).__name__}: {exc}"[:300])
        out.append(p)
    return out


class Progress:
    """A plain-text progress bar on stderr (one line per step when not a terminal)."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = total
        self.done = 0
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._width = width

    def advance(self, n: int = 1) -> None:
        self.done += n
        frac = self.done / self.total if self.total else 1.0
        filled = int(frac * self._width)
        bar = "#" * filled + "-" * (self._width - filled)
        text = f"replay [{bar}] {self.done}/{self.total} {frac * 100:3.0f}%"
        if self._tty:
            self._stream.write("\r" + text)
            if self.done >= self.total:
                self._stream.write("\n")
        else:
            self._stream.write(text + "\n")
        self._stream.flush()


async def request_replays(
    store: Store,
    event_ids: Sequence[int],
    mode: str,
    *,
    rate: float | None = None,
    progress: Progress | None = None,
) -> list[int]:
    """Queue ``event_ids`` for replay, at most ``rate`` per second; returns those queued.

    Without a rate, all are queued in one transaction. With one, each event is
    its own transaction, so stopping half-way (Ctrl-C) leaves a clean prefix.
    """
    if rate is None:
        queued = await store.replays.request(event_ids, mode)
        if progress is not None:
            progress.advance(len(event_ids))
        return queued
    queued = []
    interval = 1.0 / rate
    next_at = time.monotonic()
    for event_id in event_ids:
        delay = next_at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        queued += await store.replays.request([event_id], mode)
        next_at += interval
        if progress is not None:
            progress.advance()
    return queued
