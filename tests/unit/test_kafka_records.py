"""decode_record: bare notifications, oslo envelopes, keys, headers, poison."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from subscriber.errors import RecordRejected
from subscriber.ingest.kafka_records import decode_record, poison_dedup_key
from tests.kafka.helpers import notification


@dataclass
class Rec:
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    topic: str = "t"
    partition: int = 1
    offset: int = 42
    timestamp: int = 0


def _json(data: Any) -> bytes:
    return json.dumps(data).encode()


def test_bare_notification_with_meta() -> None:
    body = notification("vnf-1", "op-1")
    new = decode_record(Rec(_json(body), key=b"vnf-1", headers=[("h", b"v")]), "replica-a")
    assert new.source == "kafka" and json.loads(new.stored_body()) == body
    kafka = (new.meta or {})["kafka"]
    assert kafka["topic"] == "t" and kafka["partition"] == 1 and kafka["offset"] == 42
    assert kafka["record_key"] == "vnf-1" and "key_mismatch" not in kafka
    assert kafka["headers"] == [["h", "v"]] and kafka["consumer"] == "replica-a"


def test_header_values_under_secret_names_are_masked() -> None:
    headers = [("password", b"hunter2"), ("X-Api-Key", b"k-123"), ("trace", b"t1"), ("token", b"")]
    new = decode_record(Rec(_json(notification("vnf-1", "op-1")), headers=headers), "r")
    assert (new.meta or {})["kafka"]["headers"] == [
        ["password", "***"],
        ["X-Api-Key", "***"],
        ["trace", "t1"],
        ["token", ""],
    ]


def test_oslo_envelope_payload_and_key_mismatch() -> None:
    body = notification("vnf-1", "op-1")
    inner = {"event_type": "x", "publisher_id": "p", "message_id": "m", "payload": body}
    env = {"oslo.version": "2.0", "oslo.message": json.dumps(inner)}
    new = decode_record(Rec(_json(env), key=b"other"))
    assert new.notification.vnfInstanceId == "vnf-1"
    assert json.loads(new.stored_body()) == body
    assert (new.meta or {})["kafka"]["key_mismatch"] is True
    assert (new.meta or {})["oslo"]["event_type"] == "x"


@pytest.mark.parametrize(
    ("value", "field_name"),
    [
        (None, None),
        (b"\xff not json", None),
        (b'"a string"', None),
        (_json({"oslo.version": "2.0", "oslo.message": 5}), "oslo.message"),
        (_json({"oslo.version": "2.0", "oslo.message": "[]"}), "oslo.message"),
        (_json({"notificationType": "Nope"}), "notificationType"),
    ],
)
def test_poison(value: bytes | None, field_name: str | None) -> None:
    with pytest.raises(RecordRejected) as info:
        decode_record(Rec(value))
    assert info.value.field == field_name
    assert str(info.value)
    assert poison_dedup_key(Rec(value)) == "poison|kafka|t|1|42"


def test_a_wrongly_keyed_topic_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    topic = f"relay-{uuid.uuid4().hex[:6]}"
    caplog.set_level(logging.WARNING, logger="subscriber.ingest.kafka_records")
    for offset in range(5):
        new = decode_record(
            Rec(_json(notification("vnf-1", f"op-{offset}")), key=b"x", topic=topic)
        )
        assert (new.meta or {})["kafka"]["key_mismatch"] is True
    warnings = [r for r in caplog.records if "is not the body's vnfInstanceId" in r.getMessage()]
    assert len(warnings) == 1 and topic in warnings[0].getMessage()
