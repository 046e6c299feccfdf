"""Turn one Kafka record into a :class:`NewEvent`, or say why it is poison.

A record value is a SOL003 notification as JSON (the same schemas as the HTTP
callback), or an oslo.messaging v2 envelope whose message (or its ``payload``)
is one. The record key, when present, should be the vnfInstanceId; the body
wins when they disagree. Topic, partition, offset, key and headers go into the
event's ``meta`` so an operator can find the record again.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Sequence
from typing import Any, Protocol

from schemas import NotificationParseError, parse_notification, parse_notification_data
from subscriber.errors import RecordRejected
from subscriber.redact import MASK, is_secret_key
from subscriber.store import NewEvent
from subscriber.tracing import trace_id_of

__all__ = ["KafkaRecord", "decode_record", "poison_dedup_key", "record_meta"]

log = logging.getLogger(__name__)

OSLO_VERSION_KEY = "oslo.version"
OSLO_MESSAGE_KEY = "oslo.message"


class KafkaRecord(Protocol):
    """What we read of an aiokafka ``ConsumerRecord`` (a seam for unit tests)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


def poison_dedup_key(record: KafkaRecord) -> str:
    """The poison row's dedup key: where the record sits, so a redelivery adds nothing."""
    return f"poison|kafka|{record.topic}|{record.partition}|{record.offset}"


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode("ascii")


def _header_text(name: str, value: bytes | None) -> str:
    text = _text(value or b"")
    return MASK if text and is_secret_key(name) else text


def record_meta(record: KafkaRecord, consumer: str | None = None) -> dict[str, Any]:
    """Where the record came from: topic, partition, offset, timestamp, key, headers.

    Arguments:
        consumer: the consuming client's id (which replica read it), if known.
    """
    return {
        "kafka": {
            "consumer": consumer,
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            # Not "key": the store masks values under keys named like secrets.
            "record_key": None if record.key is None else _text(record.key),
            # A list of pairs: Kafka allows the same header name twice. A value under a
            # secret-like name is masked here: redact() sees pairs, not a mapping.
            "headers": [[name, _header_text(name, value)] for name, value in record.headers or ()],
        }
    }


def _unwrap_oslo(data: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """The notification inside an oslo.messaging v2 envelope, else ``data`` itself."""
    if OSLO_MESSAGE_KEY not in data:
        return data
    message = data[OSLO_MESSAGE_KEY]
    if not isinstance(message, str):
        raise RecordRejected(f"'{OSLO_MESSAGE_KEY}' must be a JSON string", OSLO_MESSAGE_KEY)
    try:
        inner = json.loads(message)
    except ValueError as exc:
        raise RecordRejected(
            f"'{OSLO_MESSAGE_KEY}' is not valid JSON: {exc}", OSLO_MESSAGE_KEY
        ) from None
    if not isinstance(inner, dict):
        raise RecordRejected(f"'{OSLO_MESSAGE_KEY}' must hold a JSON object", OSLO_MESSAGE_KEY)
    meta["oslo"] = {
        "version": data.get(OSLO_VERSION_KEY),
        "event_type": inner.get("event_type"),
        "publisher_id": inner.get("publisher_id"),
        "message_id": inner.get("message_id"),
        "priority": inner.get("priority"),
    }
    # An oslo notifier message carries the notification as its payload; a
    # bare notification may also be wrapped directly.
    payload = inner.get("payload")
    if "notificationType" not in inner and isinstance(payload, dict):
        return payload
    return inner


_VERSION = re.compile(r"[0-9A-Za-z.+-]{1,32}")


def _traceparent(record: KafkaRecord) -> str | None:
    """The relay's ``traceparent`` header (its callback's trace), when it is a valid one."""
    for name, value in record.headers or ():
        if name == "traceparent" and value:
            text = value.decode("ascii", "replace")
            return text if trace_id_of(text) is not None else None
    return None


def _api_version(record: KafkaRecord) -> str | None:
    """The relay's ``lccn-api-version`` header (Tacker's ``Version``), when it is one."""
    for name, value in record.headers or ():
        if name == "lccn-api-version" and value:
            text = value.decode("ascii", "replace")
            return text if _VERSION.fullmatch(text) else None
    return None


def decode_record(record: KafkaRecord, consumer: str | None = None) -> NewEvent:
    """Parse and validate one record.

    Arguments:
        record: the consumed record.
        consumer: the consuming client's id, kept in ``meta``.

    Returns:
        the event to append (source ``kafka``), with the record's place,
        key and headers in ``meta``, and the relay's ``lccn-api-version`` header as
        its API version.

    Raises:
        RecordRejected: empty, not JSON, not an object, or not a valid
            notification.
    """
    if not record.value:
        raise RecordRejected("record has no value")
    if b"oslo.message" not in record.value:
        # The common case, a bare notification: validate the bytes directly.
        try:
            notification = parse_notification(record.value)
        except NotificationParseError as exc:
            raise RecordRejected(exc.detail, exc.field) from None
        meta = record_meta(record, consumer)
        _check_key(record, meta, notification.vnfInstanceId)
        return NewEvent(
            source="kafka",
            notification=notification,
            raw=record.value,
            meta=meta,
            api_version=_api_version(record),
            traceparent=_traceparent(record),
        )
    try:
        data = json.loads(record.value)
    except ValueError as exc:
        raise RecordRejected(f"value is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RecordRejected("value must be a JSON object")
    meta = record_meta(record, consumer)
    body = _unwrap_oslo(data, meta)
    try:
        notification = parse_notification_data(body)
    except NotificationParseError as exc:
        raise RecordRejected(exc.detail, exc.field) from None
    _check_key(record, meta, notification.vnfInstanceId)
    return NewEvent(
        source="kafka",
        notification=notification,
        body=body,
        meta=meta,
        traceparent=_traceparent(record),
    )


# Topics already warned about: a relay that keys records wrongly would
# otherwise log a warning for every record it sends.
_mismatch_warned: set[str] = set()


def _check_key(record: KafkaRecord, meta: dict[str, Any], vnf_instance_id: str) -> None:
    key = meta["kafka"]["record_key"]
    if key is not None and key != vnf_instance_id:
        # The body is authoritative; the key only steered the partition.
        meta["kafka"]["key_mismatch"] = True
        first = record.topic not in _mismatch_warned
        _mismatch_warned.add(record.topic)
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "kafka record %s/%d@%d: key %r is not the body's vnfInstanceId %r; using the "
            "body's (warned once per topic; such events have meta.kafka.key_mismatch)",
            record.topic,
            record.partition,
            record.offset,
            key,
            vnf_instance_id,
        )
