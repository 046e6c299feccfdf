"""Assembles one lccn-subscriber process: store, runner, dispatcher, ingress.

A process plays one role:

* ``single``: everything in this process (the in-process tests, ``serve --role single``);
* ``ingest``: the HTTP callback, the Kafka source, the subscription keeper and
  the reconciler; jobs run elsewhere. With ``worker_argv`` it starts and
  watches its own worker process (``serve``'s default, see
  :mod:`subscriber.worker_link`), else a separate ``serve --role worker``
  works off the store (woken by PostgreSQL NOTIFY, or its rescan);
* ``worker``: the dispatcher, the handlers and the pruner, woken by its parent
  over ``link_fd`` (or by NOTIFY); alone it answers ``/healthz``, ``/readyz``
  and ``/metrics`` on the HTTP port.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web

from handlers import routing_for
from subscriber import tracing
from subscriber.config import Settings
from subscriber.dispatcher import Dispatcher
from subscriber.errors import ConfigError
from subscriber.handback import HookAnswers
from subscriber.health import CheckResult, Health
from subscriber.heap import freeze_long_lived
from subscriber.ingest.auth import CallbackAuth, build_ssl_context
from subscriber.ingest.hooks import LcmHooks
from subscriber.ingest.http import CallbackIngress, make_app
from subscriber.ingest.problems import problem_middleware
from subscriber.kernel import RoutingTable, Services
from subscriber.lifecycle import Component
from subscriber.metrics import Metrics, WorkMetrics, install_metrics_route
from subscriber.openstack import OpenStackClient
from subscriber.retention import Pruner
from subscriber.runner import Runner
from subscriber.ssh import SshPool
from subscriber.ssh.traced import TracedSsh
from subscriber.status import StatusReporter
from subscriber.store import Store
from subscriber.store.wake import PgWakeListener, PgWakeSender
from subscriber.tacker import EchoFilter, Reconciler, SubscriptionKeeper, TackerClient
from subscriber.worker_link import ForkedWorker, ParentLink, WorkerProcess

if TYPE_CHECKING:
    from subscriber.ingest.kafka import KafkaSource

__all__ = ["Role", "Service"]

Role = Literal["single", "ingest", "worker"]

log = logging.getLogger(__name__)


def _routing_summary(routing: RoutingTable, settings: Settings, missing: list[str]) -> str:
    """One line: which operations are handled, and what is only recorded (and why)."""
    handled: dict[str, list[str]] = {}
    for operation, state, name in routing.routes():
        if operation is not None and name != "log":
            handled.setdefault(operation, []).append(state or "*")
    parts = [f"{op} ({', '.join(sorted(states))})" for op, states in sorted(handled.items())]
    line = f"handling {'; '.join(parts)}" if parts else "handling no operation"
    line += "; every other transition is only recorded (log handler)"
    if settings.cluster.handlers == "off":
        line += "; cluster handlers off (cluster.handlers: off)"
    elif missing:
        line += f"; cluster handlers off: {' and '.join(missing)} not configured"
    return line


async def _no_work_metrics() -> bytes:
    return b""


class Service(Component):
    """The whole service; start order store -> owned clients -> status reporter ->
    dispatcher -> ingress (HTTP, Kafka) -> subscription keeper -> reconciler, stop in
    reverse (the dispatcher drains its lanes up to ``dispatch.graceful_timeout``).

    Arguments:
        settings: the effective configuration.
        routing: handler routes (defaults to the built-in routing table plus
            ``settings.handlers.modules``).
        services: clients handed to steps; each one set wins over the service's own
            (which is then neither built nor started).
        role: what this process runs (see the module docstring).
        worker_argv: ``ingest`` only: start the worker process with this command line.
        worker_fork: ``ingest`` only: the worker forked before the event loop started
            (:func:`subscriber.worker_link.fork_worker`); ``worker_argv`` starts later ones.
        link_fd: ``worker`` only: the socket to the parent that started this worker.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        routing: RoutingTable | None = None,
        services: Services | None = None,
        role: Role = "single",
        worker_argv: Sequence[str] | None = None,
        worker_fork: ForkedWorker | None = None,
        link_fd: int | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.role: Role = role
        self.ingests = role in ("single", "ingest")
        self.works = role in ("single", "worker")
        # Set when the parent of a linked worker is gone: serve_forever returns.
        self.orphaned = asyncio.Event()
        # A worker's job writes give way to ingest's appends on a shared SQLite file.
        self.store = Store(settings.database, low_priority=role == "worker")
        # Its own registry per Service (never the global one); /metrics serves it.
        self.metrics = Metrics(tacker_side="ingest" if role == "ingest" else "work")
        self.store.events.add_observer(self.metrics.observe_appends)
        # The clients steps use. Ours start and stop with the service; those the
        # caller hands in (and which win over ours) are the caller's to manage.
        given = services or Services()
        # Built (and their settings checked at start) in every role: a bad key file must
        # fail ``serve`` itself, not only its worker. Connections open on first use.
        self.ssh = SshPool(settings.ssh) if given.ssh is None else None
        self.openstack: OpenStackClient | None = None
        if given.openstack is None and settings.openstack.enabled:
            self.openstack = OpenStackClient(settings.openstack)
        self.tacker: TackerClient | None = None
        if given.tacker is None and settings.tacker.configured:
            self.tacker = TackerClient(
                settings.tacker, echo=self.store.tacker, on_retry=self.metrics.tacker_retried
            )
        # What a job run by a management-driver hook hands back to it (sealed with the
        # hooks' token); read by the hook's answer, written by the job.
        hook_token = settings.hooks.bearer()
        self.answers: HookAnswers | None = (
            HookAnswers(
                self.store.tacker,
                hook_token,
                vim_key=settings.tacker.vim_key,
                ttl=settings.hooks.answer_ttl,
            )
            if hook_token
            else None
        )
        own = Services(
            ssh=self.ssh,
            tacker=self.tacker,
            openstack=self.openstack,
            inventory=self.store.inventory,
            values=self.store.tacker,
            answers=self.answers,
        )
        self.services = own.merged(given)
        if tracing.enabled() and self.services.ssh is not None:
            # Only when on: untraced, a step's SSH call goes straight to the executor.
            self.services = replace(self.services, ssh=TracedSsh(self.services.ssh))
        self._owned: list[Any] = [c for c in (self.ssh, self.openstack, self.tacker) if c]
        configured = self.services.configured()
        missing = sorted({"tacker", "openstack"} - configured)
        if settings.cluster.handlers == "on" and missing and routing is None:
            raise ConfigError(
                f"cluster.handlers is on but {' and '.join(missing)} is not configured: set "
                + ", ".join(f"{m}.*" for m in missing)
                + " or cluster.handlers: auto"
            )
        self.routing = routing or routing_for(settings, configured)
        self._routing_line = _routing_summary(self.routing, settings, missing)
        self.echo = EchoFilter(self.store.tacker, settings.tacker, self.tacker)
        # Without a hook Tacker's op-occ cannot say how our job went: the instance's
        # metadata does (the cluster jobs of COMPLETED notifications).
        self.status: StatusReporter | None = None
        if self.works and self.tacker is not None and settings.tacker.report_status:
            from handlers.handler import ClusterHandler

            self.status = StatusReporter(
                self.tacker, settings.tacker, reports=lambda h: isinstance(h, ClusterHandler)
            )
        self.runner = Runner(
            self.store,
            self.routing,
            settings.dispatch,
            self.services,
            metrics=self.metrics,
            echo=self.echo,
            observer=self.status,
        )
        self.dispatcher = Dispatcher(self.store, self.runner, settings.dispatch, self.metrics)
        self.pruner: Pruner | None = (
            Pruner(self.store, settings.retention) if settings.retention.enabled else None
        )
        self.worker: WorkerProcess | None = None
        self.link: ParentLink | None = None
        self.wake_sender: PgWakeSender | None = None
        self.wake_listener: PgWakeListener | None = None
        if role == "ingest" and worker_argv is not None:
            self.worker = WorkerProcess(
                worker_argv,
                settings.dispatch.graceful_timeout,
                forked=worker_fork,
                on_exit=self._worker_exited,
            )
            self.store.events.add_listener(self.worker.on_appended)
            self.metrics.watch_worker(lambda: self.worker is not None and self.worker.alive)
        elif role == "ingest" and not self.store.db.is_sqlite:
            self.wake_sender = PgWakeSender(self.store.db.url)
            self.store.events.add_listener(self.wake_sender.on_appended)
        if role == "worker" and link_fd is not None:
            self.link = ParentLink(
                link_fd,
                poke=self.dispatcher.poke,
                status=self._dispatch_status,
                metrics=lambda: self.metrics.render(ingest=False, own=False),
                parent_gone=self.orphaned.set,
            )
        elif role == "worker" and not self.store.db.is_sqlite:
            self.wake_listener = PgWakeListener(self.store.db.url, self.dispatcher.poke)
        self.health = Health(self.store)
        self.subscriptions: SubscriptionKeeper | None = None
        self.reconciler: Reconciler | None = None
        self.kafka: KafkaSource | None = None
        self.auth: CallbackAuth | None = None
        # /metrics and /readyz are open only on a private listener: the callback's own when
        # it is loopback, else one of their own (http.metrics_host:metrics_port).
        self.probes: CallbackIngress | None = None
        separate = settings.http.probes_listener() is not None
        if not self.ingests:
            # A worker alone answers health and metrics on the HTTP port (or /healthz there
            # and all three on the probes listener); a linked one does not.
            self.app = web.Application(middlewares=[problem_middleware])
            self.health.install(self.app, readiness=not separate)
            if separate:
                self.probes = self._probes_listener(work=None, ingest=False)
            else:
                install_metrics_route(
                    self.app, self.metrics, self.store, ingest=False, readiness=self.health.passing
                )
            self.ingress = CallbackIngress(settings.http, self.app)
            return
        hook_path = settings.hooks.path if hook_token else None
        self.app = make_app(
            settings.http,
            self.store.events,
            hook_path=hook_path,
            responses=self.metrics.http_responses,
        )
        # Components add readiness checks here (Kafka assigned, subscription present ...).
        self.health.install(self.app)
        work = None
        if not self.works:
            # Jobs run elsewhere: their families come from our worker (or its own port).
            work = self.worker.metrics_text if self.worker is not None else _no_work_metrics
        install_metrics_route(
            self.app, self.metrics, self.store, work=work, readiness=self.health.passing
        )
        if separate:
            self.probes = self._probes_listener(work=work, ingest=True)
        if self.worker is not None:
            self.health.register("worker", self.worker.readiness)
        subscribes = self.tacker is not None and settings.tacker.subscribe_on_start
        self.auth = CallbackAuth(
            settings.auth,
            settings.http.path,
            self.metrics,
            credentials=self.store.credentials,
            # It will subscribe with generated credentials: none is accepted without them.
            required=subscribes and settings.auth.generate != "off",
            # On a listener that is not private, the probes need the callback's credentials.
            protect=("/metrics", "/readyz") if separate else (),
        )
        self.auth.install(self.app)
        self.health.register("callback_auth", self.auth.readiness)
        self.hooks = LcmHooks(
            settings.hooks, self.store, self.routing, answers=self.answers, wake=self._poke
        )
        self.hooks.install(self.app)
        self.ingress = CallbackIngress(
            settings.http, self.app, ssl_context=build_ssl_context(settings.auth)
        )
        if settings.kafka.enabled:  # kafka.bootstrap_servers is configured
            # Imported here: aiokafka (~3 MB) stays out of a serve that does not use Kafka.
            from subscriber.ingest.kafka import KafkaSource

            self.kafka = KafkaSource(settings.kafka, self.store.events)
            self._observe_kafka(self.kafka)
        if self.tacker is not None and settings.tacker.subscribe_on_start:
            self.subscriptions = SubscriptionKeeper(self.tacker, settings, self.store.credentials)
            self.health.register("subscription", self.subscriptions.readiness)
        if self.tacker is not None and settings.tacker.reconcile_interval > 0:
            keeper = self.subscriptions
            self.reconciler = Reconciler(
                self.store,
                self.tacker,
                settings.tacker,
                subscription_id=lambda: keeper.subscription_id if keeper else None,
            )

    def _probes_listener(self, *, work: WorkMetrics | None, ingest: bool) -> CallbackIngress:
        """The private listener of ``/healthz``, ``/readyz`` and ``/metrics``."""
        app = web.Application(middlewares=[problem_middleware])
        self.health.install(app)
        install_metrics_route(
            app, self.metrics, self.store, work=work, ingest=ingest, readiness=self.health.passing
        )
        return CallbackIngress(self.settings.http, app, probes=True)

    @property
    def metrics_port(self) -> int | None:
        """The port ``/metrics`` and ``/readyz`` are open on (loopback: the callback's)."""
        return self.probes.port if self.probes is not None else self.ingress.port

    def _poke(self, lane: str | None = None) -> None:
        """Wake whoever runs the jobs (this process's dispatcher, or the worker)."""
        if self.works:
            self.dispatcher.poke(lane)
        elif self.worker is not None:
            self.worker.wake(lane)
        elif self.wake_sender is not None:
            self.wake_sender.wake(lane)

    def _dispatch_status(self) -> tuple[str, str | None]:
        if not self.settings.dispatch.enabled:
            return "off", None
        return self.dispatcher.state.value, self.dispatcher.failure

    def _observe_kafka(self, kafka: KafkaSource) -> None:
        """Kafka readiness in /readyz and its lag in ``lccn_consumer_lag``."""

        async def ready() -> CheckResult:
            # A failed source (its consumer task died) says why.
            detail = "" if kafka.ready else kafka.failure or "consumer not ready"
            return CheckResult(kafka.ready, detail)

        def lag() -> None:
            # Only the partitions assigned now: one revoked by a rebalance is another
            # replica's to report, and a sum over replicas must not count it twice.
            self.metrics.consumer_lag.clear()
            for (topic, partition), behind in kafka.lag().items():
                self.metrics.consumer_lag.labels(topic, str(partition)).set(behind)

        self.health.register("kafka", ready)
        self.metrics.add_scrape_hook(lag)

    def _worker_exited(self, code: int) -> None:
        """The worker died: counted, and ``/readyz`` says so now, not after its cache."""
        self.metrics.worker_exited(code)
        self.health.invalidate()

    @property
    def port(self) -> int | None:
        return self.ingress.port

    async def _start(self) -> None:
        await self._start_child(self.store)
        for client in self._owned:
            await self._start_child(client)
        if self.works:
            if self.status is not None:
                await self._start_child(self.status)
            if self.settings.dispatch.enabled:
                await self._start_child(self.dispatcher)
            if self.pruner is not None:
                await self._start_child(self.pruner)
            for waker in (self.link, self.wake_listener):
                if waker is not None:
                    await self._start_child(waker)
            if not self.ingests:
                if self.link is None:
                    await self._start_child(self.ingress)
                    if self.probes is not None:
                        await self._start_child(self.probes)
                log.info(self._routing_line)
                return
        if self.wake_sender is not None:
            await self._start_child(self.wake_sender)
        # Before the callback listens: the stored credentials are read.
        if self.auth is not None:
            await self._start_child(self.auth)
        await self._start_child(self.ingress)
        if self.probes is not None:
            await self._start_child(self.probes)
        if self.auth is not None:
            self.auth.announce()  # "callback auth off" is a warning worth one line
        if self.kafka is not None:
            # Returns at once; connecting and joining the group go on in
            # the background (a broker that is down only delays ingest).
            await self._start_child(self.kafka)
        # After ingress: Tacker tests the callback with a GET while subscribing.
        if self.subscriptions is not None:
            await self._start_child(self.subscriptions)
        if self.reconciler is not None:
            await self._start_child(self.reconciler)
        # Last: a start that failed (port taken, Tacker refused us) leaves no worker behind.
        if self.worker is not None:
            await self._start_child(self.worker)
        if self.role == "single":
            log.info(self._routing_line)

    async def _stop(self) -> None:
        if self.worker is None:
            return
        # Stop taking notifications before the worker drains its running steps.
        for part in (self.reconciler, self.subscriptions, self.kafka, self.ingress, self.probes):
            if part is not None:
                await part.stop()

    async def serve_forever(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (SIGTERM/SIGINT in the CLI).

        A stop asked for while the service is still starting (a slow migration, Tacker
        slow to confirm the subscription) abandons the start: what already started is
        stopped and nothing more begins, so a supervisor's SIGTERM is obeyed promptly.
        """
        starting = asyncio.ensure_future(self.start())
        stopped = asyncio.ensure_future(stop.wait())
        orphaned = asyncio.ensure_future(self.orphaned.wait())
        try:
            await asyncio.wait((starting, stopped, orphaned), return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                log.info("stop asked for while starting: the start is abandoned")
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
                return
            starting.result()  # a failed start raises here (the CLI's one-line error)
            frozen = freeze_long_lived()
            log.debug("moved %d start-up objects out of the collector's reach", frozen)
            await asyncio.wait((stopped, orphaned), return_when=asyncio.FIRST_COMPLETED)
            log.info(
                "stopping", extra={"graceful_timeout": self.settings.dispatch.graceful_timeout}
            )
        finally:
            for waiter in (starting, stopped, orphaned):
                waiter.cancel()
            await self.stop()
