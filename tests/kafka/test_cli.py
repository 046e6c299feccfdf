"""``kafka publish`` and ``kafka status`` against a real broker."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest

from subscriber.cli.helpers import parent_parsers
from subscriber.cli.kafka import add_parsers, kafka_publish, kafka_status, run_kafka_command
from subscriber.config import Settings
from subscriber.ingest.kafka import KafkaSource
from subscriber.store import Store
from tests.kafka.helpers import (
    create_topic,
    fast_settings,
    transitions,
    uid,
    wait_until,
)
from tests.testbed import kafka_broker


def _settings(bootstrap: str, topic: str, group: str) -> Settings:
    return Settings(kafka=fast_settings(bootstrap, topic, group))


async def _status(settings: Settings) -> dict[str, Any]:
    out = io.StringIO()
    assert await kafka_status(settings, fmt="json", out=out) == 0
    doc: dict[str, Any] = json.loads(out.getvalue())
    return doc


async def test_publish_forms_then_status_shows_lag(
    broker: Any, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = uid("topic"), uid("group")
    await create_topic(broker.bootstrap, topic, 3)
    settings = _settings(broker.bootstrap, topic, group)
    bodies = transitions(12, instances=4)

    single = tmp_path / "one.json"
    single.write_text(json.dumps(bodies[0]))
    array = tmp_path / "array.json"
    array.write_text(json.dumps(bodies[1:6], indent=2))
    lines = tmp_path / "lines.jsonl"
    lines.write_text("\n".join(json.dumps(b) for b in bodies[6:10]) + "\n\n")
    out = io.StringIO()
    for path in (single, array, lines):
        assert await kafka_publish(settings, str(path), out=out) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(json.dumps(b) for b in bodies[10:])))
    assert await kafka_publish(settings, "-", topic, out=out) == 0
    assert "published 4 notification(s)" in out.getvalue()

    before = await _status(settings)
    assert before["groupId"] == group
    assert len(before["partitions"]) == 3
    assert before["totalLag"] == 12
    assert all(p["committed"] is None for p in before["partitions"])

    async with KafkaSource(settings.kafka, store.events) as source:
        await wait_until(lambda: source.status().stored == 12, 30, what="12 events")
        await wait_until(lambda: sum(source.lag().values()) == 0, 10, what="no lag")
    events = await store.events.list()
    assert sorted(e.vnf_lcm_op_occ_id or "" for e in events) == sorted(
        b["vnfLcmOpOccId"] for b in bodies
    )
    # Keyed by vnfInstanceId: one instance's records share a partition.
    by_instance: dict[str, set[int]] = {}
    for e in events:
        by_instance.setdefault(e.vnf_instance_id or "", set()).add(
            e.meta_json()["kafka"]["partition"]
        )
        assert e.meta_json()["kafka"]["record_key"] == e.vnf_instance_id
    assert all(len(parts) == 1 for parts in by_instance.values())

    after = await _status(settings)
    assert after["totalLag"] == 0
    assert sum(p["committed"] or 0 for p in after["partitions"]) == 12
    table = io.StringIO()
    assert await kafka_status(settings, out=table) == 0
    assert "total lag 0" in table.getvalue() and topic in table.getvalue()


async def test_publish_refuses_invalid_input_and_sends_nothing(broker: Any, tmp_path: Path) -> None:
    topic, group = uid("topic"), uid("group")
    await create_topic(broker.bootstrap, topic, 1)
    settings = _settings(broker.bootstrap, topic, group)
    good, bad = transitions(2)
    del bad["operationState"]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps([good, bad]))
    err = io.StringIO()
    assert await kafka_publish(settings, str(path), err=err) == 1
    assert "item 1" in err.getvalue() and "operationState" in err.getvalue()
    path.write_text("{not json")
    assert await kafka_publish(settings, str(path), err=err) == 1
    assert await kafka_publish(settings, str(tmp_path / "missing.json"), err=err) == 1
    assert (await _status(settings))["totalLag"] == 0


async def test_unreachable_broker_and_unconfigured(tmp_path: Path) -> None:
    nowhere = f"127.0.0.1:{kafka_broker.free_port()}"
    settings = _settings(nowhere, "t", "g")
    path = tmp_path / "one.json"
    path.write_text(json.dumps(transitions(1)[0]))
    err = io.StringIO()
    assert await kafka_publish(settings, str(path), err=err) == 4  # unavailable
    assert await kafka_status(settings, err=err) == 4
    assert "no Kafka broker answered" in err.getvalue()
    assert await kafka_status(Settings(), err=err) == 3


async def test_parser_wiring(broker: Any) -> None:
    topic = uid("topic")
    await create_topic(broker.bootstrap, topic, 1)
    parser = argparse.ArgumentParser(prog="lccn-subscriber")
    add_parsers(parser.add_subparsers(dest="command"), parent_parsers())
    args = parser.parse_args(["kafka", "status", "--format", "json"])
    assert (args.command, args.kafka_command, args.format) == ("kafka", "status", "json")
    args = parser.parse_args(["kafka", "publish", "-", "--topic", topic])
    assert (args.path, args.topic, args.validate) == ("-", topic, True)
    settings = _settings(broker.bootstrap, topic, uid("group"))
    assert await run_kafka_command(parser.parse_args(["kafka", "status"]), settings) == 0
