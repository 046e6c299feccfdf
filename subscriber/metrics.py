"""Prometheus metrics: one :class:`Metrics` (and its own registry) per Service.

Never the process-global registry: tests run several services in one process,
and a replay CLI must not share counters with the server it talks to.

Two kinds of values:

* counters and histograms moved by the code as things happen (events appended,
  duplicates, stale/echo skips, jobs by outcome, step durations, retries of
  jobs and of Tacker calls, callback authentication failures);
* gauges read from the store when ``/metrics`` is scraped (queue depth, failed
  and poison events, seconds since the last notification, lanes nobody holds
  while their job runs, hooks waiting for their job), so they are true across
  restarts and replicas. That read is one transaction, cached for ``store_ttl``.

The job side's families (jobs, steps, retries, lanes, skips) live in a
registry of their own, :attr:`Metrics.work_registry`: when ``serve`` runs its
jobs in a worker process, the ingest process serves its own families and the
worker's (asked for over the link at each scrape) on one ``/metrics``.

Each process also serves families of its own, never asked for over the link
(:attr:`Metrics.probe_registry`): its readiness checks (``lccn_ready``) and, in
``serve``'s ingest process, whether its worker lives (``lccn_worker_up``,
``lccn_worker_exits``).

Other components set what only they know: ``consumer_lag`` (Kafka ingest),
``http_responses`` (the callback listener's middleware).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, Protocol

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from subscriber.store import EventStatus, Store
from subscriber.store.events import AppendObservation

__all__ = [
    "CONTENT_TYPE_LATEST",
    "AuthCounters",
    "Metrics",
    "Readiness",
    "RelayMetrics",
    "WorkMetrics",
    "install_metrics_route",
]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_STEP_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


def _short_type(notification_type: str | None) -> str:
    if not notification_type:
        return "unknown"
    return notification_type.removesuffix("Notification")


def _http_responses(registry: CollectorRegistry) -> Counter:
    return Counter(
        "lccn_http_responses",
        "HTTP answers of the callback listener, by endpoint (callback, hooks, probes, other) "
        "and status code",
        ["endpoint", "code"],
        registry=registry,
    )


class AuthCounters(Protocol):
    """What the callback's auth counts its refusals in (``Metrics``, ``RelayMetrics``)."""

    auth_failures: Counter


class RelayMetrics:
    """The relay's metrics (``serve --role relay``): what it produced, how fast, what failed.

    A registry of its own: the relay has no store, no jobs and no lanes to show.
    """

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.produced = Counter(
            "lccn_relay_produced",
            "Notifications the broker acknowledged (acks=all), by topic",
            ["topic"],
            registry=r,
        )
        self.produce_latency = Histogram(
            "lccn_relay_produce_seconds",
            "From handing a notification to the producer until the broker acknowledged it",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.produce_failures = Counter(
            "lccn_relay_produce_failures",
            "Notifications answered 503 because the broker did not acknowledge them, by reason "
            "(unavailable: no broker answered in time; refused: the broker refused the record)",
            ["reason"],
            registry=r,
        )
        self.auth_failures = Counter(
            "lccn_auth_failures",
            "Rejected callback or token requests, by endpoint",
            ["endpoint"],
            registry=r,
        )
        self.http_responses = _http_responses(r)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class Metrics:
    """The service's metrics; ``render()`` gives the exposition text.

    Arguments:
        store_ttl: how long a store read behind the gauges is reused.
        tacker_side: the registry that counts this process's Tacker retries: ``"ingest"``
            in a ``--role ingest`` process (its Tacker calls are the reconciler's and the
            subscription's; its worker counts the jobs' own), else ``"work"``. Either way
            each ``/metrics`` shows the family once.
    """

    def __init__(
        self, *, store_ttl: float = 1.0, tacker_side: Literal["ingest", "work"] = "work"
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.work_registry = CollectorRegistry(auto_describe=True)
        r, w = self.registry, self.work_registry
        self.events_received = Counter(
            "lccn_events_received",
            "Events stored (duplicates excluded), by source, notification type and operation state",
            ["source", "type", "state"],
            registry=r,
        )
        self.events_duplicate = Counter(
            "lccn_events_duplicate",
            "Notifications acknowledged without storing: the transition was already stored",
            ["source"],
            registry=r,
        )
        self.events_skipped = Counter(
            "lccn_events_skipped",
            "Events recorded but not run: stale (older than a handled transition) or echo",
            ["reason"],
            registry=w,
        )
        self.ingest_latency = Histogram(
            "lccn_ingest_latency_seconds",
            "From handing a notification to the store until it is committed (ack may follow)",
            ["source"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.jobs = Counter(
            "lccn_jobs", "Job runs that ended, by outcome", ["outcome", "mode"], registry=w
        )
        self.step_duration = Histogram(
            "lccn_step_duration_seconds",
            "Step run time, by step name and outcome",
            ["step", "outcome"],
            buckets=_STEP_BUCKETS,
            registry=w,
        )
        self.retries = Counter(
            "lccn_job_retries",
            "Job attempts that failed transiently and were rescheduled",
            registry=w,
        )
        self.tacker_retries = Counter(
            "lccn_tacker_retries",
            "Tacker calls retried after an answer of 409 (instance busy) or 5xx, by status "
            "(0: no answer)",
            ["status"],
            registry=r if tacker_side == "ingest" else w,
        )
        self.auth_failures = Counter(
            "lccn_auth_failures",
            "Rejected callback or token requests, by endpoint",
            ["endpoint"],
            registry=r,
        )
        self.consumer_lag = Gauge(
            "lccn_consumer_lag",
            "Records behind the end of each partition (set by the Kafka ingest)",
            ["topic", "partition"],
            registry=r,
        )
        self.lanes_active = Gauge(
            "lccn_lanes_active", "Lanes (VNF instances) running a job in this process", registry=w
        )
        self.queue_depth = Gauge(
            "lccn_queue_depth", "Open events in the store, by status", ["status"], registry=r
        )
        self.lane_queue_depth_max = Gauge(
            "lccn_lane_queue_depth_max", "Open events of the longest lane", registry=r
        )
        self.failed_events = Gauge(
            "lccn_failed_events", "Events whose job failed for good (replayable)", registry=r
        )
        self.poison_events = Gauge(
            "lccn_poison_events",
            "Kafka records kept as poison: not notifications, never run",
            registry=r,
        )
        self.seconds_since_last_notification = Gauge(
            "lccn_seconds_since_last_notification",
            "Seconds since the newest stored notification was received (-1: none yet)",
            registry=r,
        )
        self.lanes_past_lease = Gauge(
            "lccn_lanes_past_lease",
            "Lanes with a running event whose lease nobody holds: the holder died or stalls "
            "and no worker took the lane over",
            registry=r,
        )
        self.hooks_waiting = Gauge(
            "lccn_hooks_waiting",
            "Management-driver hook requests whose job has not ended (Tacker's operation waits)",
            registry=r,
        )
        self.hook_wait_seconds_max = Gauge(
            "lccn_hook_wait_seconds_max",
            "Seconds the longest-waiting hook request has waited for its job (0: none waits)",
            registry=r,
        )
        self.http_responses = _http_responses(r)
        # This process's own: never asked for over the worker link.
        self.probe_registry = p = CollectorRegistry(auto_describe=True)
        self.ready = Gauge(
            "lccn_ready",
            "Readiness checks of this process (1: passing, 0: failing), as /readyz reports them",
            ["check"],
            registry=p,
        )
        self.worker_exits: Counter | None = None
        self._scrape_hooks: list[Callable[[], None]] = []
        self._store_ttl = store_ttl
        self._store_read_at = 0.0
        self._store_lock = asyncio.Lock()
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}

    # -- hooks ---------------------------------------------------------------

    def observe_appends(self, batch: Any) -> None:
        """EventStore observer: every append outcome, duplicates included."""
        child = self._child
        for item in batch:
            assert isinstance(item, AppendObservation)
            child(self.ingest_latency, item.source).observe(item.seconds)
            if item.duplicate:
                child(self.events_duplicate, item.source).inc()
            else:
                child(
                    self.events_received,
                    item.source,
                    _short_type(item.notification_type),
                    item.operation_state or "",
                ).inc()

    def _child(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)``, each series' child looked up once: every append
        passes here, and prometheus_client's ``labels()`` costs several times an ``inc()``."""
        key = (metric, values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def job_finished(self, outcome: str, mode: str) -> None:
        self.jobs.labels(outcome, mode).inc()
        if outcome == "retry":
            self.retries.inc()

    def step_finished(self, step: str, outcome: str, seconds: float) -> None:
        self.step_duration.labels(step, outcome).observe(seconds)

    def skipped(self, reason: str) -> None:
        self.events_skipped.labels(reason).inc()

    def watch_worker(self, up: Callable[[], bool]) -> None:
        """Show whether ``serve``'s worker process lives: ``lccn_worker_up`` (``up()`` at each
        scrape) and ``lccn_worker_exits`` (moved by :meth:`worker_exited`)."""
        Gauge(
            "lccn_worker_up",
            "Whether the worker process that runs the jobs lives and beats (1) or not (0)",
            registry=self.probe_registry,
        ).set_function(lambda: 1.0 if up() else 0.0)
        self.worker_exits = Counter(
            "lccn_worker_exits",
            "Worker processes that exited while serve ran (each is restarted with backoff)",
            registry=self.probe_registry,
        )

    def worker_exited(self, code: int) -> None:
        """The worker process exited on its own (``code``: its exit code, or -signal)."""
        if self.worker_exits is not None:
            self.worker_exits.inc()

    def tacker_retried(self, status: int) -> None:
        """The Tacker client's ``on_retry``: one call is tried again after ``status``."""
        self.tacker_retries.labels(str(status)).inc()

    # -- scrape --------------------------------------------------------------

    def add_scrape_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` before each scrape (e.g. to copy Kafka lag into ``consumer_lag``)."""
        self._scrape_hooks.append(hook)

    def run_scrape_hooks(self) -> None:
        for hook in self._scrape_hooks:
            try:
                hook()
            except Exception:
                logging.getLogger(__name__).warning("metrics: scrape hook failed", exc_info=True)

    async def refresh_from_store(self, store: Store) -> None:
        """Read the store-backed gauges, at most once per ``store_ttl``."""
        async with self._store_lock:
            if time.monotonic() - self._store_read_at < self._store_ttl:
                return

            stats = await store.events.queue_stats()
            for status in EventStatus.OPEN:
                self.queue_depth.labels(status).set(stats.by_status.get(status, 0))
            self.lane_queue_depth_max.set(stats.longest_lane)
            self.failed_events.set(stats.by_status.get(EventStatus.FAILED, 0))
            self.poison_events.set(stats.by_status.get(EventStatus.POISON, 0))
            now = time.time()
            newest = stats.newest_received_at
            self.seconds_since_last_notification.set(
                -1 if newest is None else max(0.0, now - newest)
            )
            self.lanes_past_lease.set(stats.lanes_past_lease)
            self.hooks_waiting.set(stats.hooks_waiting)
            since = stats.oldest_hook_since
            self.hook_wait_seconds_max.set(0.0 if since is None else max(0.0, now - since))
            self._store_read_at = time.monotonic()

    def set_readiness(self, checks: Mapping[str, bool]) -> None:
        """``lccn_ready``: each readiness check's result."""
        for name, ok in checks.items():
            self.ready.labels(name).set(1 if ok else 0)

    def render(self, *, ingest: bool = True, work: bool = True, own: bool = True) -> bytes:
        """The Prometheus text exposition: the ingest side's families, the job side's, this
        process's own (readiness, its worker), or any of them."""
        data = generate_latest(self.registry) if ingest else b""
        if work:
            data += generate_latest(self.work_registry)
        if own:
            data += generate_latest(self.probe_registry)
        return data


WorkMetrics = Callable[[], Awaitable[bytes]]
#: Every readiness check's name and whether it passes (``Health.readiness``, shaped).
Readiness = Callable[[], Awaitable[Mapping[str, bool]]]


def install_metrics_route(
    app: web.Application,
    metrics: Metrics,
    store: Store,
    *,
    work: WorkMetrics | None = None,
    ingest: bool = True,
    readiness: Readiness | None = None,
) -> None:
    """``GET /metrics`` on ``app``: the store-backed gauges refreshed, then the exposition.

    Arguments:
        work: where the job side's families come from when jobs run in another
            process (the worker's exposition); ``None``: from ``metrics`` itself.
        ingest: serve the ingest side's families (and the store-backed gauges).
        readiness: the process's readiness checks, shown as ``lccn_ready`` at each scrape.
    """

    async def handler(request: web.Request) -> web.Response:
        metrics.run_scrape_hooks()
        if readiness is not None:
            metrics.set_readiness(await readiness())
        try:
            if ingest:
                await metrics.refresh_from_store(store)
        except Exception:
            # Counters are still worth serving when the store is unreachable (/readyz says why).
            logging.getLogger(__name__).warning("metrics: store read failed", exc_info=True)
        body = metrics.render(ingest=ingest, work=work is None)
        if work is not None:
            body += await work()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_route("GET", "/metrics", handler)
