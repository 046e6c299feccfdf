"""``lccn-subscriber kafka status|publish``: consumer-group lag, publishing notifications.

:func:`kafka_status` and :func:`kafka_publish` print their own one-line
errors and return the exit code (0 ok, 1 bad input, 2 no broker answered,
3 Kafka not configured), so tests can call them with their own streams.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any, TextIO

from schemas import NotificationParseError, parse_notification_data
from subscriber.cli.helpers import (
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_INPUT,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    PROG,
    Parents,
    Subparsers,
    settings_from,
)
from subscriber.config import KafkaSettings, Settings
from subscriber.errors import LccnError, PublishInputError

__all__ = [
    "add_parsers",
    "group_lag",
    "kafka_publish",
    "kafka_status",
    "read_notifications",
    "run_kafka_command",
]


def add_parsers(subparsers: Subparsers, parents: Parents) -> None:
    """Add ``kafka status`` and ``kafka publish FILE|-``.

    Arguments:
        subparsers: the root parser's subcommands.
        parents: the shared option parsers (both subcommands take ``--config``).
    """
    kafka = subparsers.add_parser("kafka", help="Kafka ingest: consumer lag, publish notifications")
    sub = kafka.add_subparsers(dest="kafka_command", required=True, metavar="COMMAND")
    status = sub.add_parser(
        "status",
        parents=[parents.config],
        help="committed offset, end offset and lag per partition",
    )
    status.add_argument("--format", choices=("table", "json"), default="table")
    publish = sub.add_parser(
        "publish",
        parents=[parents.config],
        help="produce notification JSON (one object, an array, or JSON lines), "
        "keyed by vnfInstanceId",
    )
    publish.add_argument("path", metavar="FILE|-", help="a file, or - for standard input")
    publish.add_argument("--topic", default=None, help="default: the first of kafka.topics")
    publish.add_argument(
        "--no-validate",
        dest="validate",
        action="store_false",
        help="send objects even if they are not valid notifications",
    )
    kafka.set_defaults(func=_cmd_kafka)


def _cmd_kafka(args: argparse.Namespace) -> int:
    return asyncio.run(run_kafka_command(args, settings_from(args)))


async def run_kafka_command(args: argparse.Namespace, settings: Settings) -> int:
    """Run the ``kafka`` subcommand parsed by :func:`add_parsers`; returns the exit code."""
    # We print one line per failure ourselves; aiokafka's per-attempt errors are noise here.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    if args.kafka_command == "status":
        return await kafka_status(settings, fmt=args.format)
    return await kafka_publish(settings, args.path, args.topic, validate=args.validate)


def _need_servers(section: KafkaSettings, err: TextIO) -> bool:
    if section.enabled:
        return True
    print(
        f"{PROG}: configuration error: kafka is not configured: set kafka.bootstrap_servers "
        "(LCCN_KAFKA__BOOTSTRAP_SERVERS)",
        file=err,
    )
    return False


# -- status --------------------------------------------------------------------


async def kafka_status(
    settings: Settings,
    *,
    fmt: str = "table",
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Print the consumer group's committed offset, end offset and lag per partition.

    Arguments:
        settings: the whole settings; only ``kafka`` is used.
        fmt: ``table`` or ``json``.

    Returns:
        0, or 4 when no broker answered, 3 when Kafka is not configured.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    section = settings.kafka
    if not _need_servers(section, err):
        return EXIT_CONFIG
    try:
        rows = await group_lag(section)
    except LccnError as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return EXIT_UNAVAILABLE if exc.retriable else EXIT_ERROR
    total = sum(r["lag"] for r in rows if r["lag"] is not None)
    if fmt == "json":
        doc = {
            "bootstrapServers": list(section.bootstrap_servers),
            "groupId": section.group_id,
            "partitions": rows,
            "totalLag": total,
        }
        print(json.dumps(doc, indent=2), file=out)
        return EXIT_OK
    print(f"group {section.group_id} on {','.join(section.bootstrap_servers)}", file=out)
    header = ("TOPIC", "PARTITION", "COMMITTED", "END", "LAG")
    table = [header] + [
        (
            r["topic"],
            str(r["partition"]),
            "-" if r["committed"] is None else str(r["committed"]),
            str(r["end"]),
            "-" if r["lag"] is None else str(r["lag"]),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)), file=out)
    if not rows:
        print("(no matching topics)", file=out)
    print(f"total lag {total}", file=out)
    return EXIT_OK


async def group_lag(section: KafkaSettings) -> list[dict[str, Any]]:
    """Committed offset, end offset and lag of every partition the group consumes.

    Lag counts from the group's committed offset, i.e. records not yet known
    to be stored; partitions the group never committed count from 0.

    Raises:
        BrokerUnavailable: no broker answered.
        IngestError: another Kafka error.
    """
    # Imported here, as in _produce: serve imports this module, and aiokafka is only
    # loaded when Kafka is used.
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from subscriber.ingest.kafka_client import client_options, kafka_errors

    consumer = AIOKafkaConsumer(
        **client_options(section),
        group_id=section.group_id,
        enable_auto_commit=False,
        auto_offset_reset="latest",
    )
    with kafka_errors("kafka status"):
        try:
            await consumer.start()
            topics = sorted(await consumer.topics())
            if section.topic_pattern:
                pattern = re.compile(section.topic_pattern)
                wanted = [t for t in topics if pattern.fullmatch(t)]
            else:
                wanted = [t for t in section.topics if t in topics]
            tps = [
                TopicPartition(topic, p)
                for topic in wanted
                for p in sorted(consumer.partitions_for_topic(topic) or ())
            ]
            if not tps:
                return []
            consumer.assign(tps)
            ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
            # One fetch at the end learns each partition's high watermark: some
            # Kafka-protocol brokers (Tansu) answer ListOffsets with the start
            # of the last batch, not the end of the log.
            for tp in tps:
                consumer.seek(tp, ends[tp])
            await consumer.getmany(timeout_ms=1000)
            rows = []
            for tp in tps:
                end = max(ends[tp], consumer.highwater(tp) or 0)
                committed = await consumer.committed(tp)
                rows.append(
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "committed": committed,
                        "end": end,
                        "lag": max(0, end - (committed or 0)),
                    }
                )
            return rows
        finally:
            # Also after a failed start: the client holds connections by then.
            await consumer.stop()


# -- publish -------------------------------------------------------------------


def read_notifications(text: str, *, validate: bool = True) -> list[dict[str, Any]]:
    """Notifications from one JSON object, a JSON array, or JSON lines.

    Raises:
        PublishInputError: bad JSON, a non-object item, or (with ``validate``)
            an item that is not a valid notification; the message says which.
    """
    items: list[Any]
    try:
        whole = json.loads(text)
    except ValueError:
        items = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except ValueError as exc:
                raise PublishInputError(f"line {number}: not valid JSON: {exc}") from None
    else:
        items = whole if isinstance(whole, list) else [whole]
    if not items:
        raise PublishInputError("no notifications in the input")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise PublishInputError(f"item {index}: not a JSON object")
        if validate:
            try:
                parse_notification_data(item)
            except NotificationParseError as exc:
                raise PublishInputError(f"item {index}: {exc.detail}") from None
    return items


def _record_key(item: dict[str, Any]) -> bytes | None:
    key = item.get("vnfInstanceId")
    return key.encode() if isinstance(key, str) and key else None


async def kafka_publish(
    settings: Settings,
    path: str,
    topic: str | None = None,
    *,
    validate: bool = True,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Produce notifications from a file (or ``-`` for stdin), keyed by vnfInstanceId.

    Arguments:
        settings: the whole settings; only ``kafka`` is used.
        path: a file with one JSON object, a JSON array, or JSON lines; ``-``
            reads standard input.
        topic: defaults to the first of ``kafka.topics``.
        validate: refuse the whole input if an item is not a valid notification.

    Returns:
        0; 1 for bad input (nothing is sent); 4 when no broker answered;
        3 when Kafka is not configured.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    section = settings.kafka
    if not _need_servers(section, err):
        return EXIT_CONFIG
    try:
        if path == "-":
            text = await asyncio.to_thread(sys.stdin.read)
        else:
            text = await asyncio.to_thread(Path(path).read_text, encoding="utf-8")
        items = read_notifications(text, validate=validate)
    except (OSError, UnicodeDecodeError, PublishInputError) as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return EXIT_INPUT
    target = topic or section.publish_topic
    try:
        sent = await _produce(section, target, items)
    except LccnError as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return EXIT_UNAVAILABLE if exc.retriable else EXIT_ERROR
    print(f"published {sent} notification(s) to {target}", file=out)
    return EXIT_OK


async def _produce(section: KafkaSettings, topic: str, items: list[dict[str, Any]]) -> int:
    from aiokafka import AIOKafkaProducer

    from subscriber.ingest.kafka_client import kafka_errors, producer_options

    producer = AIOKafkaProducer(**producer_options(section))
    with kafka_errors(f"publish to {topic!r}"):
        try:
            await producer.start()
            futures = [
                await producer.send(
                    topic,
                    json.dumps(item, separators=(",", ":")).encode(),
                    key=_record_key(item),
                )
                for item in items
            ]
            for future in futures:
                await future
        finally:
            await producer.stop()
    return len(items)
