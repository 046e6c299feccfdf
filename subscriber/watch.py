"""Live view of the store: new events, each job's steps as they end, each event's outcome.

Reads only (any process can watch a store that ``serve`` writes): every
``interval`` seconds it asks for events newer than the last one seen, and for
the jobs and steps of the events still open. Each change is one record;
:func:`format_record` makes a terminal line of it. Used by ``lccn-subscriber
events watch`` and by the demo.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from subscriber.store import EventRow, EventStatus, Store

__all__ = ["format_record", "watch"]

Record = dict[str, Any]


def _node_of(result: Any) -> str:
    """What a step's result says about the nodes it worked on, briefly."""
    if not isinstance(result, dict):
        return ""
    for key in ("node", "joined", "retired", "nodes"):
        value = result.get(key)
        if value:
            return ", ".join(value) if isinstance(value, list) else str(value)
    return ""


async def watch(
    store: Store,
    emit: Callable[[Record], None],
    *,
    instance: str | None = None,
    interval: float = 0.5,
    from_start: bool = False,
    until_idle: bool = False,
) -> None:
    """Emit a record for each new event, finished step and settled event until cancelled.

    Arguments:
        store: an open store (read only here).
        emit: called with each record (``kind``: ``watching`` once the first look
            is done, then ``event``, ``step``, ``settled``).
        instance: only this VNF instance's events.
        interval: seconds between looks.
        from_start: show the events already stored too (else only newer ones).
        until_idle: return once every event seen has settled (after at least one).
    """
    last_id = 0
    if not from_start:
        newest = await store.events.list(vnf_instance_id=instance)
        last_id = newest[-1].id if newest else 0
    emit({"kind": "watching", "afterId": last_id, "instance": instance})
    open_events: dict[int, EventRow] = {}
    seen_steps: dict[tuple[int, str], str] = {}
    seen_any = False
    while True:
        for event in await store.events.list(vnf_instance_id=instance, after_id=last_id):
            last_id = event.id
            seen_any = True
            emit({"kind": "event", **event.summary()})
            open_events[event.id] = event
        if open_events:
            current = {e.id: e for e in await store.events.get_many(list(open_events))}
            for event_id in sorted(open_events):
                event = current.get(event_id, open_events[event_id])
                for job in await store.jobs.for_event(event_id):
                    for step in await store.jobs.steps(job.id):
                        if step.status in ("running", "pending"):
                            continue
                        if seen_steps.get((job.id, step.name)) == step.status:
                            continue
                        seen_steps[(job.id, step.name)] = step.status
                        took = (
                            step.finished_at - step.started_at
                            if step.finished_at and step.started_at
                            else None
                        )
                        emit(
                            {
                                "kind": "step",
                                "eventId": event_id,
                                "jobId": job.id,
                                "handler": job.handler,
                                "step": step.name,
                                "status": step.status,
                                "seconds": round(took, 2) if took is not None else None,
                                "node": _node_of(step.result_json()),
                                "error": step.error,
                            }
                        )
                if event.status not in EventStatus.OPEN:
                    jobs = await store.jobs.for_event(event_id)
                    emit(
                        {
                            "kind": "settled",
                            "eventId": event_id,
                            "status": event.status,
                            "detail": event.status_detail,
                            "error": jobs[-1].last_error if jobs else None,
                        }
                    )
                    del open_events[event_id]
                else:
                    open_events[event_id] = event
        if until_idle and seen_any and not open_events:
            return
        await asyncio.sleep(interval)


def format_record(record: Record) -> str:
    """One terminal line for a record of :func:`watch`."""
    stamp = time.strftime("%H:%M:%S")
    if record["kind"] == "watching":
        which = f" of instance {record['instance']}" if record.get("instance") else ""
        return f"{stamp} watching events{which} after id {record['afterId']} (Ctrl-C stops)"
    if record["kind"] == "event":
        what = record.get("operation") or record.get("notificationType")
        state = record.get("operationState") or ""
        inst = (record.get("vnfInstanceId") or "")[:8]
        head = f"{stamp} event {record['id']:>5}  {what} {state}"
        return f"{head}  instance {inst}  [{record['status']}]"
    if record["kind"] == "step":
        took = f" {record['seconds']:.2f}s" if record.get("seconds") is not None else ""
        node = f"  {record['node']}" if record.get("node") else ""
        error = f"  {record['error']}" if record.get("error") else ""
        return (
            f"{stamp}   event {record['eventId']:>5}  {record['handler']}  "
            f"{record['step']:<24} {record['status']}{took}{node}{error}"
        )
    extra = record.get("error") or record.get("detail") or ""
    return f"{stamp} event {record['eventId']:>5}  settled: {record['status']}" + (
        f"  ({extra})" if extra else ""
    )
