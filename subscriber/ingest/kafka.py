"""The Kafka ingest source: consume notification records, store them, commit.

Delivery is at-least-once into the store and exactly-once into a job: a record's
offset is committed only after it, and every record before it in its partition,
is durably in the store; redeliveries (and the HTTP copy of the same transition)
collapse on the store's dedup key.

The poll loop only fetches and hands records to append tasks; it never blocks
on the store. When ``max_in_flight`` records wait for it, the loop waits up to
a second for appends to finish (pausing would drop what aiokafka prefetched);
if the store is still behind, it pauses its partitions and keeps polling, so
aiokafka's ``max_poll_interval`` never expires and the group never rebalances
because of us (aiokafka #848).
Records that are not notifications are stored as poison and committed past.

::

    poll loop ──getmany──> append tasks (one per fetched batch, one append_many each)
        │                        │ store.append_many / append_poison, retried with backoff
        │ pause/resume           v
        └──────────────── OffsetTracker ──> committer (every commit_interval,
                                            and before partitions are revoked)
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import ConsumerStoppedError, KafkaError
from aiokafka.structs import OffsetAndMetadata

from subscriber import tracing
from subscriber.config import KafkaSettings
from subscriber.errors import RecordRejected
from subscriber.ingest.kafka_client import consumer_options
from subscriber.ingest.kafka_records import (
    KafkaRecord,
    decode_record,
    poison_dedup_key,
    record_meta,
)
from subscriber.ingest.offsets import OffsetTracker, Partition, Ticket
from subscriber.ingest.traced import ingest_attributes, note_appended
from subscriber.lifecycle import Component, State, wait_set
from subscriber.store import AppendResult, NewEvent

__all__ = [
    "EventSink",
    "KafkaSource",
    "KafkaSourceStatus",
]

log = logging.getLogger(__name__)

# The owned tasks: the main one (connect, poll, and at stop drain and commit),
# and the two helpers it runs while connected.
_MAIN = "kafka-source"
_COMMIT = "kafka-source-commit"
_HEALTH = "kafka-source-health"

# How long one getmany() waits for records; also how quickly the loop notices
# that it may resume paused partitions or must stop.
_POLL_TIMEOUT_MS = 200


T = TypeVar("T")


class EventSink(Protocol):
    """Where the source puts what it reads; :class:`~subscriber.store.EventStore` is one."""

    async def append(self, new: NewEvent) -> AppendResult: ...

    async def append_many(self, news: Sequence[NewEvent]) -> list[AppendResult]: ...

    async def append_poison(
        self,
        *,
        source: str,
        raw: bytes,
        error: str,
        dedup_key: str,
        meta: dict[str, Any] | None = None,
    ) -> AppendResult: ...


@dataclass(frozen=True, slots=True)
class KafkaSourceStatus:
    """A snapshot for readiness probes, ``kafka status`` and metrics."""

    state: State
    ready: bool
    broker_ok: bool
    store_ok: bool
    assignment: tuple[tuple[str, int], ...]
    in_flight: int
    paused: bool
    rebalances: int
    stored: int
    duplicates: int
    poison: int
    last_error: str | None
    lag: dict[tuple[str, int], int]


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Commits what is stored before partitions go; resets tracking when they come."""

    def __init__(self, source: KafkaSource) -> None:
        self._source = source

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._source._on_revoked([Partition(tp.topic, tp.partition) for tp in revoked])

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self._source._on_assigned([Partition(tp.topic, tp.partition) for tp in assigned])


class KafkaSource(Component):
    """Consumes notification records into the event store.

    Usage::

        async with KafkaSource(settings.kafka, store.events) as source:
            ...  # source.ready, source.lag()

    Arguments:
        settings: the ``kafka`` section (must have ``bootstrap_servers``).
        sink: where events go; normally ``store.events``.
        consumer_factory: builds the aiokafka consumer from keyword options
            (a seam for tests); defaults to :class:`aiokafka.AIOKafkaConsumer`.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        sink: EventSink,
        *,
        consumer_factory: Any = None,
    ) -> None:
        if not settings.enabled:
            raise ValueError("KafkaSource needs kafka.bootstrap_servers")
        super().__init__()
        self._settings = settings
        self._sink = sink
        self._factory = consumer_factory or AIOKafkaConsumer
        self._consumer: Any = None
        self._tracker = OffsetTracker()
        self._commit_lock = asyncio.Lock()
        self._progress = asyncio.Event()
        self._batches: set[asyncio.Task[None]] = set()
        self._in_flight = 0
        self._paused = False
        self._broker_ok = False
        self._store_ok = True
        self._last_error: str | None = None
        self._logged_errors: set[str] = set()
        self._rebalances = 0
        self._stored = 0
        self._duplicates = 0
        self._poison = 0

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Start consuming in the background.

        Returns at once: connecting, joining the group and polling happen in
        an owned task that retries until :meth:`stop`, so a broker that is down
        at start-up only delays ingest (see :attr:`ready`).

        Raises:
            RuntimeError: the source was started before.
        """
        await super().start()

    async def _start(self) -> None:
        # _run() handles every error it expects; should it die anyway (a bug),
        # the source fails loudly: readiness says no, so the process
        # supervisor can restart us.
        self._spawn(_MAIN, self._run, restart=False)

    async def stop(self) -> None:
        """Stop polling, let in-flight appends finish, commit them, leave the group.

        In-flight appends get ``graceful_timeout`` seconds; records still not
        stored then are not committed and will be redelivered. Idempotent.
        """
        await super().stop()

    async def _stop(self) -> None:
        # The main task's ``finally`` runs that sequence, helpers stopped
        # after the final commit.
        await self._cancel_task(_MAIN)

    def _on_task_error(self, name: str, exc: BaseException) -> None:
        self._last_error = f"consumer task died: {type(exc).__name__}: {exc}"
        self._broker_ok = False

    # -- status --------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Running, the broker answers, and the store takes appends."""
        return (
            self.state is State.RUNNING
            and self._task(_MAIN) is not None
            and self._broker_ok
            and self._store_ok
        )

    @property
    def rebalances(self) -> int:
        """How many times partitions were assigned to us (the first join counts)."""
        return self._rebalances

    def lag(self) -> dict[tuple[str, int], int]:
        """Records not yet stored, per assigned partition.

        Lag is the partition's high watermark (from the last fetch) minus the
        first offset not yet durably stored. Partitions not fetched from yet
        are left out.
        """
        consumer = self._consumer
        if consumer is None:
            return {}
        out: dict[tuple[str, int], int] = {}
        try:
            assignment = consumer.assignment()
        except Exception:
            return {}
        for tp in assignment:
            highwater = consumer.highwater(tp)
            if highwater is None:
                continue
            part = Partition(tp.topic, tp.partition)
            first = self._tracker.next_unstored(part)
            if first is None:
                first = self._tracker.committed(part)
            out[(tp.topic, tp.partition)] = max(0, highwater - first) if first is not None else 0
        return out

    def status(self) -> KafkaSourceStatus:
        """A snapshot of the source's state, counters and lag."""
        assignment: tuple[tuple[str, int], ...] = ()
        if self._consumer is not None:
            try:
                assignment = tuple(
                    sorted((tp.topic, tp.partition) for tp in self._consumer.assignment())
                )
            except Exception:
                assignment = ()
        return KafkaSourceStatus(
            state=self.state,
            ready=self.ready,
            broker_ok=self._broker_ok,
            store_ok=self._store_ok,
            assignment=assignment,
            in_flight=self._in_flight,
            paused=self._paused,
            rebalances=self._rebalances,
            stored=self._stored,
            duplicates=self._duplicates,
            poison=self._poison,
            last_error=self._last_error,
            lag=self.lag(),
        )

    def _note_error(self, where: str, exc: BaseException) -> None:
        text = f"{where}: {type(exc).__name__}: {exc}"
        self._last_error = text
        # Log each distinct error once per outage, not on every retry.
        if text not in self._logged_errors:
            self._logged_errors.add(text)
            log.warning("kafka source %s", text)

    # -- main task -----------------------------------------------------------

    async def _run(self) -> None:
        backoff = self._settings.retry_backoff
        while True:
            consumer = self._factory(**consumer_options(self._settings))
            listener = _Listener(self)
            if self._settings.topic_pattern:
                consumer.subscribe(pattern=self._settings.topic_pattern, listener=listener)
            else:
                consumer.subscribe(topics=list(self._settings.topics), listener=listener)
            try:
                await consumer.start()
            except asyncio.CancelledError:
                await _stop_quietly(consumer, self._settings.request_timeout)
                raise
            except KafkaError as exc:
                self._broker_ok = False
                self._note_error("connect", exc)
                await _stop_quietly(consumer, self._settings.request_timeout)
                await asyncio.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, self._settings.store_backoff_max)
                continue
            break
        self._consumer = consumer
        self._broker_ok = True
        self._logged_errors.clear()
        log.info(
            "kafka source connected to %s, group %r",
            ",".join(self._settings.bootstrap_servers),
            self._settings.group_id,
        )
        self._spawn(_COMMIT, self._commit_loop, restart=True)
        self._spawn(_HEALTH, self._health_loop, restart=True)
        try:
            await self._poll_loop(consumer)
        finally:
            # Stop order: intake stopped (we are out of the poll loop), drain
            # in-flight appends, final commit, helpers, then the consumer.
            await self._drain(self._settings.graceful_timeout)
            await self._commit(within=self._settings.request_timeout)
            await self._cancel_task(_COMMIT)
            await self._cancel_task(_HEALTH)
            await _stop_quietly(consumer, self._settings.request_timeout)
            self._broker_ok = False

    async def _poll_loop(self, consumer: Any) -> None:
        limit = self._settings.max_in_flight
        # How long the loop waits for a behind store before pausing, and how
        # often it polls while paused: well inside max_poll_interval.
        hold = min(self._settings.pause_after, self._settings.max_poll_timeout / 4)
        full_since: float | None = None
        while True:
            if self._in_flight >= limit or (self._paused and self._in_flight > limit // 2):
                # The store is behind. Wait for it rather than pause at once:
                # pausing a partition drops the records aiokafka prefetched
                # for it, and they are fetched again on resume.
                now = time.monotonic()
                full_since = full_since if full_since is not None else now
                if not self._paused and now - full_since >= hold:
                    self._pause(consumer)
                self._progress.clear()
                wait = hold if self._paused else full_since + hold - now
                await wait_set(self._progress, wait)
                if self._paused:
                    # A poll keeps the membership alive; paused partitions
                    # return nothing, so re-pause any assigned since.
                    self._pause(consumer)
                    if not await self._poll(consumer, 0):
                        return
                continue
            full_since = None
            if self._paused:
                self._resume(consumer)
            if not await self._poll(consumer, _POLL_TIMEOUT_MS):
                return

    async def _poll(self, consumer: Any, timeout_ms: int) -> bool:
        """One ``getmany``, its records handed to an append task; ``False`` once stopped."""
        settings = self._settings
        try:
            batches = await consumer.getmany(
                timeout_ms=timeout_ms, max_records=settings.max_poll_records
            )
        except ConsumerStoppedError:
            return False
        except KafkaError as exc:
            # Fetch-level errors (authorization, offsets out of range
            # without a reset policy): note, back off, keep polling so the
            # group membership stays alive.
            self._note_error("poll", exc)
            await asyncio.sleep(settings.retry_backoff)
            return True
        if not batches:
            return True
        work: list[tuple[KafkaRecord, Ticket]] = []
        for tp, records in batches.items():
            part = Partition(tp.topic, tp.partition)
            for record in records:
                work.append((record, self._tracker.track(part, record.offset)))
        self._in_flight += len(work)
        task = asyncio.create_task(self._store_batch(work), name="kafka-source-append")
        self._batches.add(task)
        task.add_done_callback(self._batch_done)
        return True

    def _pause(self, consumer: Any) -> None:
        assignment = consumer.assignment()
        if assignment:
            consumer.pause(*assignment)
        if not self._paused:
            self._paused = True
            log.info("kafka source paused: %d records waiting for the store", self._in_flight)

    def _resume(self, consumer: Any) -> None:
        assignment = consumer.assignment()
        if assignment:
            consumer.resume(*assignment)
        self._paused = False
        log.info("kafka source resumed")

    # -- appends -------------------------------------------------------------

    def _batch_done(self, task: asyncio.Task[None]) -> None:
        self._batches.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("kafka append task failed", exc_info=task.exception())

    async def _store_batch(self, work: Sequence[tuple[KafkaRecord, Ticket]]) -> None:
        # The valid records of a fetch go to the store in one call and join
        # one group commit; poison records are kept one by one.
        valid: list[tuple[Ticket, NewEvent]] = []
        poison: list[tuple[KafkaRecord, Ticket]] = []
        for record, ticket in work:
            try:
                valid.append((ticket, decode_record(record, self._settings.client_id)))
            except Exception:
                poison.append((record, ticket))
        # One ingest span per record, ended once the batch is stored (or abandoned).
        spans = [tracing.NOOP] * len(valid)
        if tracing.enabled():
            # A relay's record carries its callback's trace: continued, else a new one.
            spans = [
                tracing.start(
                    "ingest", ingest_attributes("kafka", new.notification), parent=new.traceparent
                )
                for _, new in valid
            ]
            valid = [
                (ticket, replace(new, traceparent=span.traceparent))
                for (ticket, new), span in zip(valid, spans, strict=True)
            ]
        error: BaseException | None = None
        try:
            if valid:
                results = await self._append_many_with_retry([new for _, new in valid])
                for (ticket, _), result, span in zip(valid, results, spans, strict=True):
                    if result.duplicate:
                        self._duplicates += 1
                    else:
                        self._stored += 1
                    note_appended(span, result)
                    self._tracker.done(ticket)
        except BaseException as exc:
            error = exc
            raise
        finally:
            for span in spans:
                span.end(error)
            self._in_flight -= len(valid)
            self._progress.set()
        await asyncio.gather(*(self._store_one(record, ticket) for record, ticket in poison))

    async def _append_many_with_retry(self, news: list[NewEvent]) -> list[AppendResult]:
        return await self._store_retrying(lambda: self._sink.append_many(news))

    async def _store_retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run a store call until it succeeds, backing off while the store is unavailable.

        StoreUnavailable, a stopped store, a driver error: the records are
        kept and their offsets held, so nothing is committed past them; dedup
        makes whatever a failed call did store harmless on the next try.
        """
        delay = self._settings.store_backoff_initial
        while True:
            try:
                result = await call()
            except Exception as exc:
                self._store_ok = False
                self._note_error("store", exc)
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, self._settings.store_backoff_max)
                continue
            if not self._store_ok:
                self._store_ok = True
                self._logged_errors = {e for e in self._logged_errors if not e.startswith("store")}
                log.info("kafka source: store is taking appends again")
            return result

    async def _store_one(self, record: KafkaRecord, ticket: Ticket) -> None:
        try:
            try:
                new: NewEvent | None = decode_record(record, self._settings.client_id)
                rejected: RecordRejected | None = None
            except RecordRejected as exc:
                new, rejected = None, exc
            except Exception as exc:  # a bug in decoding must not wedge the partition
                new, rejected = None, RecordRejected(f"could not decode: {type(exc).__name__}")
            result = await self._append_with_retry(record, new, rejected)
            if rejected is not None:
                self._poison += not result.duplicate
                log.warning(
                    "kafka record %s/%d@%d stored as poison: %s",
                    record.topic,
                    record.partition,
                    record.offset,
                    rejected.error,
                )
            elif result.duplicate:
                self._duplicates += 1
            else:
                self._stored += 1
            self._tracker.done(ticket)
        finally:
            self._in_flight -= 1
            self._progress.set()

    async def _append_with_retry(
        self, record: KafkaRecord, new: NewEvent | None, rejected: RecordRejected | None
    ) -> AppendResult:
        if new is not None:
            event = new
            return await self._store_retrying(lambda: self._sink.append(event))
        assert rejected is not None
        meta = record_meta(record, self._settings.client_id)
        if rejected.field:
            meta["field"] = rejected.field
        return await self._store_retrying(
            lambda: self._sink.append_poison(
                source="kafka",
                raw=record.value or b"",
                error=rejected.error,
                dedup_key=poison_dedup_key(record),
                meta=meta,
            )
        )

    async def _drain(self, within: float, tps: Iterable[Partition] | None = None) -> bool:
        """Wait until no append is in flight (for ``tps``, or at all); ``False`` on timeout."""
        wanted = list(tps) if tps is not None else None

        def busy() -> bool:
            if wanted is None:
                return self._in_flight > 0
            return any(self._tracker.in_flight(tp) for tp in wanted)

        deadline = time.monotonic() + within
        while busy():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if wanted is None:
                    for task in list(self._batches):
                        task.cancel()
                    await asyncio.gather(*self._batches, return_exceptions=True)
                return False
            self._progress.clear()
            await wait_set(self._progress, remaining)
        return True

    # -- commits -------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.commit_interval)
            await self._commit(within=self._settings.request_timeout)

    async def _commit(
        self, *, within: float, tps: Iterable[Partition] | None = None
    ) -> dict[Partition, int]:
        """Commit every stored prefix that moved; errors are noted, not raised."""
        consumer = self._consumer
        if consumer is None:
            return {}
        async with self._commit_lock:
            try:
                assigned = {Partition(tp.topic, tp.partition) for tp in consumer.assignment()}
            except Exception:
                return {}
            wanted = assigned if tps is None else assigned & set(tps)
            offsets = self._tracker.committable(wanted)
            if not offsets:
                return {}
            request = {
                TopicPartition(tp.topic, tp.partition): OffsetAndMetadata(offset, "")
                for tp, offset in offsets.items()
            }
            try:
                # Shielded: a stop() mid-commit must not leave us unsure whether
                # the broker has it (it only risks a redelivery, but why add one).
                await asyncio.wait_for(asyncio.shield(consumer.commit(request)), within)
            except (KafkaError, TimeoutError) as exc:
                # A rebalance or a broker outage: the records stay stored, the
                # commit is retried on the next tick (or by the next owner).
                self._note_error("commit", exc)
                return {}
            self._tracker.mark_committed(offsets)
            return offsets

    async def _on_revoked(self, revoked: list[Partition]) -> None:
        # Give appends of these partitions a moment, commit what is stored,
        # then forget them: late completions become stale and change nothing.
        await self._drain(self._settings.revoke_drain_timeout, revoked)
        committed = await self._commit(within=self._settings.request_timeout, tps=revoked)
        self._tracker.revoke(revoked)
        log.info(
            "kafka partitions revoked: %s (committed %s)",
            _fmt(revoked),
            {f"{tp.topic}/{tp.partition}": o for tp, o in committed.items()},
        )

    def _on_assigned(self, assigned: list[Partition]) -> None:
        self._tracker.assign(assigned)
        self._rebalances += 1
        log.info("kafka partitions assigned: %s", _fmt(assigned))

    # -- health --------------------------------------------------------------

    async def _health_loop(self) -> None:
        consumer = self._consumer
        interval = self._settings.health_interval
        while True:
            try:
                # A metadata round trip: cheap, and it fails at once when no
                # broker accepts connections.
                await asyncio.wait_for(consumer.topics(), min(interval * 2, 10.0))
            except (KafkaError, TimeoutError, OSError) as exc:
                if self._broker_ok:
                    log.warning(
                        "kafka broker unreachable; offsets read so far will not be committed"
                    )
                # The broker may come back with another log (lost storage, topic
                # recreated): offsets from before the outage must not be
                # committed into it. Their records are redelivered instead.
                self._tracker.forget_progress()
                self._broker_ok = False
                self._note_error("broker", exc)
            else:
                if not self._broker_ok:
                    log.info("kafka broker reachable again")
                    self._logged_errors = {
                        e for e in self._logged_errors if not e.startswith("broker")
                    }
                self._broker_ok = True
            await asyncio.sleep(interval)


def _fmt(tps: Iterable[Partition]) -> str:
    return ", ".join(f"{tp.topic}/{tp.partition}" for tp in sorted(tps)) or "-"


async def _stop_quietly(consumer: Any, within: float) -> None:
    # Bounded: leaving the group talks to the broker, and a shutdown must not
    # hang on a broker that stopped answering.
    try:
        await asyncio.wait_for(consumer.stop(), within)
    except TimeoutError:
        log.warning("kafka consumer did not stop within %.0f s; abandoned", within)
    except Exception as exc:
        log.debug("kafka consumer stop failed: %r", exc)
