"""The ingest span of one notification (see :mod:`subscriber.tracing`): ids, never bodies."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

from schemas import Notification, VnfLcmOperationOccurrenceNotification
from subscriber import tracing
from subscriber.store import NewEvent
from subscriber.tracing import Span

__all__ = ["append_traced", "ingest_attributes", "note_appended"]

T = TypeVar("T")


def ingest_attributes(source: str, notification: Notification) -> dict[str, str] | None:
    """The ingest span's attributes: where it came from and which transition it is
    (``None`` while tracing is off: nothing to build)."""
    if not tracing.enabled():
        return None
    attrs = {
        "lccn.source": source,
        "lccn.notification_type": notification.notificationType.value,
        "lccn.vnf_instance_id": notification.vnfInstanceId,
    }
    if isinstance(notification, VnfLcmOperationOccurrenceNotification):
        attrs["lccn.vnf_lcm_op_occ_id"] = notification.vnfLcmOpOccId
        attrs["lccn.operation"] = notification.operation.value
        attrs["lccn.operation_state"] = notification.operationState.value
    return attrs


def note_appended(span: Span, result: Any) -> None:
    """Record the store's answer: the event id, and whether it was a copy (whose trace
    is then not the one its job continues: the first copy's is)."""
    event_id = getattr(result, "event_id", None)
    if event_id is not None:
        span.set("lccn.event_id", event_id)
        span.set("lccn.duplicate", bool(getattr(result, "duplicate", False)))


async def append_traced(append: Callable[[NewEvent], Awaitable[T]], new: NewEvent) -> T:
    """``append(new)`` inside an ``ingest`` span whose traceparent the event carries: where
    an event is made (the reconciler, the drain hook), its trace starts, as a callback's."""
    with tracing.span("ingest", ingest_attributes(new.source, new.notification)) as span:
        result = await append(replace(new, traceparent=span.traceparent))
        note_appended(span, result)
        return result
