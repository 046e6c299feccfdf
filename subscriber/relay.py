"""The relay role (``serve --role relay``): Tacker's callback, produced to Kafka.

Tacker 16 publishes no lifecycle event to Kafka; it calls callback URIs. The
relay is the callback endpoint Tacker's subscription points at when Kafka is
the bus between Tacker and the workers: the same validation, auth, size limits
and ProblemDetails as ``serve``'s own callback (:mod:`subscriber.ingest.http`),
then each notification produced to ``kafka.topics[0]``, keyed by
``vnfInstanceId`` (one instance's transitions stay in one partition, in order),
with an idempotent producer and ``acks=all``. Tacker gets 204 only after the
broker acknowledged the record, 503 while no broker does. The relay keeps no
store: replicas behind a load balancer scale it. Workers (``serve`` with the
Kafka source) consume, store, deduplicate and run the jobs.

Record headers carry what a consumer needs beyond the body:

* ``lccn-api-version``: the callback's ``Version`` header, else the API version
  the notification's links name (``1.3.0`` for v1, ``2.0.0`` for v2);
* ``lccn-received-at``: when the relay received it (epoch seconds);
* ``lccn-relay``: which relay (``relay.id``, default host name and pid);
* ``traceparent``: the W3C trace context of the callback's ingest span (tracing
  on), which the consumer's trace of the event continues.

Callback credentials: the ones the settings name (``auth.basic``,
``auth.oauth2``, ``auth.mtls``), and, when ``database.url`` is a shared
PostgreSQL store, the credentials ``lccn-subscriber subscribe`` generated and
recorded there (read only; the relay writes nothing to it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from subscriber.config import KafkaSettings, RelaySettings, Settings
from subscriber.errors import BrokerUnavailable, IngestError
from subscriber.health import CheckResult, Health
from subscriber.ingest.auth import CallbackAuth, build_ssl_context
from subscriber.ingest.http import CallbackIngress, make_app
from subscriber.ingest.problems import problem_middleware
from subscriber.lifecycle import Component
from subscriber.metrics import CONTENT_TYPE_LATEST, RelayMetrics
from subscriber.store import NewEvent, Store

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer

__all__ = ["KafkaProduceSink", "Relay", "record_headers"]

log = logging.getLogger(__name__)

API_VERSIONS = {"v1": "1.3.0", "v2": "2.0.0"}


def record_headers(new: NewEvent, relay_id: str, received_at: float) -> list[tuple[str, bytes]]:
    """The headers of the record a notification becomes (see the module docstring)."""
    version = new.api_version
    if version is None:
        links = getattr(new.notification, "links", None)
        href = getattr(getattr(links, "vnfInstance", None), "href", "")
        version = API_VERSIONS["v1" if "/vnflcm/v1/" in href else "v2"]
    headers = [
        ("lccn-api-version", version.encode()),
        ("lccn-received-at", f"{received_at:.6f}".encode()),
        ("lccn-relay", relay_id.encode()),
    ]
    if new.traceparent:
        headers.append(("traceparent", new.traceparent.encode()))
    return headers


class KafkaProduceSink(Component):
    """Where the relay's callback hands each notification: the topic, once acknowledged.

    The producer connects in the background and again after the broker was lost, so
    the relay starts (and answers 503) while no broker is there.

    Arguments:
        kafka: the ``kafka`` settings (brokers, TLS/SASL, topics).
        relay: the ``relay`` settings (id, produce timeout).
        metrics: produce latency and failures are counted here.
    """

    def __init__(self, kafka: KafkaSettings, relay: RelaySettings, metrics: RelayMetrics) -> None:
        super().__init__()
        self._kafka = kafka
        self._timeout = relay.produce_timeout
        self.relay_id = relay.id or f"{socket.gethostname()}-{os.getpid()}"
        self.topic = kafka.publish_topic
        self._metrics = metrics
        self._idempotence = relay.idempotence
        self.idempotent = False  # whether the producer running now is
        self._producer: AIOKafkaProducer | None = None
        self._failure = "not connected yet"

    async def _start(self) -> None:
        self._spawn("connect", self._connect, restart=True)

    async def _stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()  # flushes what is in flight

    async def _reconnect(self) -> None:
        """A broker that refused the producer itself (a lost producer id after the cluster
        was replaced, say) gets a new producer; meanwhile callbacks answer 503."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()
        if self._task("connect") is None:
            self._spawn("connect", self._connect, restart=True)

    async def _connect(self) -> None:
        """Start a producer, retrying with backoff until a broker answers."""
        from aiokafka import AIOKafkaProducer

        from subscriber.ingest.kafka_client import kafka_errors, producer_options

        delay = self._kafka.retry_backoff
        idempotent = self._idempotence != "off"
        while True:
            options: dict[str, Any] = {
                **producer_options(self._kafka),
                "request_timeout_ms": int(self._timeout * 1000),
            }
            if idempotent:
                options["enable_idempotence"] = True
            producer = AIOKafkaProducer(**options)
            try:
                with kafka_errors(f"connect to {', '.join(self._kafka.bootstrap_servers)}"):
                    await producer.start()
            except (BrokerUnavailable, IngestError) as exc:
                await producer.stop()
                if idempotent and not exc.retriable and self._idempotence == "auto":
                    # A broker that answers but grants no producer id (InitProducerId).
                    # aiokafka keeps one batch per partition in flight: order is kept; a
                    # retried send may duplicate, which the workers' dedup collapses.
                    log.warning(
                        "relay: the broker refused an idempotent producer (%s); producing "
                        "without, the workers' dedup collapses a retried send's duplicate",
                        exc.message,
                    )
                    idempotent = False
                    continue
                self._failure = exc.message
                log.warning("relay: %s; retrying in %.1f s", exc.message, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self._producer, self.idempotent = producer, idempotent
            self._failure = ""
            log.info(
                "relay producing",
                extra={
                    "topic": self.topic,
                    "brokers": list(self._kafka.bootstrap_servers),
                    "idempotent": idempotent,
                },
            )
            return

    async def append(self, new: NewEvent) -> None:
        """Produce ``new`` and wait for the broker's acknowledgement.

        Raises:
            BrokerUnavailable: no broker acknowledged within ``relay.produce_timeout``
                (the callback answers 503 with Retry-After).
            IngestError: the broker refused the record (503).
        """
        from subscriber.ingest.kafka_client import kafka_errors

        producer = self._producer
        if producer is None:
            self._metrics.produce_failures.labels("unavailable").inc()
            raise BrokerUnavailable(f"no Kafka broker answered ({self._failure})")
        started = time.monotonic()
        value = new.raw if new.raw is not None else new.stored_body().encode()
        key = new.notification.vnfInstanceId.encode()
        headers = record_headers(new, self.relay_id, time.time())
        try:
            with kafka_errors(f"produce to {self.topic!r}"):
                async with asyncio.timeout(self._timeout):
                    await producer.send_and_wait(self.topic, value, key=key, headers=headers)
        except TimeoutError:
            self._metrics.produce_failures.labels("unavailable").inc()
            self._failure = f"no acknowledgement within {self._timeout:g} s"
            raise BrokerUnavailable(
                f"produce to {self.topic!r}: no acknowledgement within {self._timeout:g} s"
            ) from None
        except BrokerUnavailable as exc:
            self._metrics.produce_failures.labels("unavailable").inc()
            self._failure = exc.message
            raise
        except IngestError as exc:
            self._metrics.produce_failures.labels("refused").inc()
            self._failure = exc.message
            await self._reconnect()
            raise
        self._failure = ""
        self._metrics.produce_latency.observe(time.monotonic() - started)
        self._metrics.produced.labels(self.topic).inc()

    async def readiness(self) -> CheckResult:
        """Ready while a broker acknowledges; the detail names the brokers."""
        brokers = ", ".join(self._kafka.bootstrap_servers)
        if self._producer is None or self._failure:
            return CheckResult(False, f"{brokers}: {self._failure or 'not connected'}")
        mode = "" if self.idempotent else " (not idempotent)"
        return CheckResult(True, f"{brokers}: producing to {self.topic}{mode}")


class Relay(Component):
    """The relay process: callback listener -> producer; probes; no store of its own.

    Arguments:
        settings: the effective configuration; ``kafka.bootstrap_servers`` must be set.
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.metrics = RelayMetrics()
        self.sink = KafkaProduceSink(settings.kafka, settings.relay, self.metrics)
        # Generated callback credentials live in a shared store; a per-host SQLite file
        # is none of the relay's business.
        self.store: Store | None = (
            None if settings.database.url.startswith("sqlite") else Store(settings.database)
        )
        self.health = Health(None)
        self.health.register("kafka", self.sink.readiness)
        self.app = make_app(settings.http, self.sink, responses=self.metrics.http_responses)
        separate = settings.http.probes_listener() is not None
        self.health.install(self.app, readiness=not separate)
        if not separate:
            self.app.router.add_route("GET", "/metrics", self._metrics_page)
        self.auth = CallbackAuth(
            settings.auth,
            settings.http.path,
            self.metrics,
            credentials=self.store.credentials if self.store is not None else None,
            protect=("/metrics", "/readyz") if separate else (),
        )
        self.auth.install(self.app)
        self.health.register("callback_auth", self.auth.readiness)
        self.ingress = CallbackIngress(
            settings.http, self.app, ssl_context=build_ssl_context(settings.auth)
        )
        self.probes: CallbackIngress | None = None
        if separate:
            probes = web.Application(middlewares=[problem_middleware])
            self.health.install(probes)
            probes.router.add_route("GET", "/metrics", self._metrics_page)
            self.probes = CallbackIngress(settings.http, probes, probes=True)

    async def _metrics_page(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    @property
    def port(self) -> int | None:
        return self.ingress.port

    @property
    def metrics_port(self) -> int | None:
        return self.probes.port if self.probes is not None else self.ingress.port

    async def _start(self) -> None:
        if self.store is not None:
            await self._start_child(self.store)
        await self._start_child(self.sink)
        await self._start_child(self.auth)
        await self._start_child(self.ingress)
        if self.probes is not None:
            await self._start_child(self.probes)
        self.auth.announce()

    async def serve_forever(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, then stop (intake first, then the producer)."""
        async with self:
            await stop.wait()
