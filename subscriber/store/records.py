"""Plain values passed in and out of the store."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from schemas import (
    STATE_RANK,
    Notification,
    VnfLcmOperationOccurrenceNotification,
)
from subscriber.redact import may_hold_secret, redact

__all__ = ["APPEND_COLUMNS", "AppendResult", "EventRow", "NewEvent", "dedup_key_of", "op_occ_key"]

SOURCES = ("http", "kafka", "reconcile", "replay", "hook")


def dedup_key_of(notification: Notification, attempt: int = 0) -> str:
    """The dedup key of DESIGN.md (never the notification ``id``: Tacker makes a new one per send).

    Op-occ notifications: (vnfLcmOpOccId, operationState, notificationStatus),
    plus the op-occ attempt from the first retry or rollback on
    (:mod:`subscriber.store.attempts`). Identifier notifications:
    (notificationType, vnfInstanceId).
    """
    if isinstance(notification, VnfLcmOperationOccurrenceNotification):
        return op_occ_key(
            notification.vnfLcmOpOccId,
            notification.operationState.value,
            notification.notificationStatus.value,
            attempt,
        )
    return "|".join(("ident", notification.notificationType.value, notification.vnfInstanceId))


def op_occ_key(op_occ_id: str, state: str, status: str, attempt: int = 0) -> str:
    """The dedup key of an op-occ transition (attempt 0 keeps the original form)."""
    key = f"opocc|{op_occ_id}|{state}|{status}"
    return f"{key}|{attempt}" if attempt else key


@dataclass(frozen=True, slots=True)
class NewEvent:
    """One received transition, ready to append.

    Arguments:
        source: ``http``, ``kafka``, ``reconcile``, ``replay`` or ``hook`` (the drain
            hook's stand-in for a PROCESSING notification not yet received).
        notification: the validated notification.
        body: the decoded JSON body as received, or ``None`` when ``raw`` is given.
        raw: the body's bytes as received. The store keeps them verbatim when
            they cannot hold a secret, and otherwise decodes and redacts them.
        api_version: the ``Version`` header, when present.
        meta: where it came from (Kafka topic/partition/offset/headers ...).
        traceparent: the W3C ``traceparent`` of its ingest span (tracing on); the job
            continues that trace, in whichever process runs it.
    """

    source: str
    notification: Notification
    body: dict[str, Any] | None = None
    api_version: str | None = None
    meta: dict[str, Any] | None = None
    raw: bytes | None = None
    traceparent: str | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"unknown event source {self.source!r}")
        if self.body is None and self.raw is None:
            raise ValueError("NewEvent needs body or raw")

    def stored_body(self) -> str:
        """The body as it may be stored: verbatim if it cannot hold a secret, else redacted."""
        if self.raw is not None:
            text = self.raw.decode("utf-8")
            if not may_hold_secret(text):
                return text
        data = self.body if self.body is not None else json.loads(self.raw or b"{}")
        return json.dumps(redact(data), separators=(",", ":"))

    @property
    def dedup_key(self) -> str:
        """The key of the op-occ's first attempt; the store adds the attempt when it is later."""
        return dedup_key_of(self.notification)


@dataclass(frozen=True, slots=True)
class AppendResult:
    event_id: int
    duplicate: bool


@dataclass(slots=True)
class EventRow:
    """An event as stored."""

    id: int
    received_at: float
    updated_at: float
    source: str
    notification_type: str | None
    notification_id: str | None
    vnf_instance_id: str | None
    vnf_lcm_op_occ_id: str | None
    operation: str | None
    operation_state: str | None
    notification_status: str | None
    state_rank: int | None
    dedup_key: str
    api_version: str | None
    body: str
    meta: str | None
    status: str
    status_detail: str | None
    extra: dict[str, Any] = field(default_factory=dict)
    # ``resume``/``anew`` while a replay waits for its lane (see ReplayMode).
    replay_mode: str | None = None
    notified_at: float | None = None
    op_occ_attempt: int = 0
    # The ingest span's W3C traceparent (tracing on): the job's span continues it.
    traceparent: str | None = None

    @classmethod
    def from_mapping(cls, row: Any) -> EventRow:
        return cls(
            **{k: row[k] for k in _EVENT_COLUMNS},
            replay_mode=row.get("replay_mode"),
            notified_at=row.get("notified_at"),
            op_occ_attempt=row.get("op_occ_attempt") or 0,
            traceparent=row.get("traceparent"),
        )

    def body_json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.body)
        return data

    def meta_json(self) -> dict[str, Any]:
        return json.loads(self.meta) if self.meta else {}

    def summary(self) -> dict[str, Any]:
        """The public JSON shape used by ``events list --format json``."""
        return {
            "id": self.id,
            "receivedAt": self.received_at,
            "source": self.source,
            "notificationType": self.notification_type,
            "vnfInstanceId": self.vnf_instance_id,
            "vnfLcmOpOccId": self.vnf_lcm_op_occ_id,
            "operation": self.operation,
            "operationState": self.operation_state,
            "notificationStatus": self.notification_status,
            "attempt": self.op_occ_attempt,
            "status": self.status,
            "statusDetail": self.status_detail,
            "replayMode": self.replay_mode,
            "traceId": self.trace_id,
        }

    @property
    def trace_id(self) -> str | None:
        """The id of the event's trace (tracing was on at ingest), else ``None``."""
        from subscriber.tracing import trace_id_of

        return trace_id_of(self.traceparent)


_EVENT_COLUMNS = (
    "id",
    "received_at",
    "updated_at",
    "source",
    "notification_type",
    "notification_id",
    "vnf_instance_id",
    "vnf_lcm_op_occ_id",
    "operation",
    "operation_state",
    "notification_status",
    "state_rank",
    "dedup_key",
    "api_version",
    "body",
    "meta",
    "status",
    "status_detail",
)
# What an append writes, in this order (the store gives the id).
APPEND_COLUMNS = (*_EVENT_COLUMNS[1:], "notified_at", "op_occ_attempt", "traceparent")


def state_rank(notification: Notification) -> int | None:
    if isinstance(notification, VnfLcmOperationOccurrenceNotification):
        return STATE_RANK[notification.operationState]
    return None
