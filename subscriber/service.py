"""Assembles one lccn-subscriber process: store, runner, dispatcher, ingress."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from handlers import registry_for
from subscriber.config import Settings
from subscriber.dispatcher import Dispatcher
from subscriber.errors import ConfigError
from subscriber.health import CheckResult, Health
from subscriber.heap import freeze_long_lived
from subscriber.ingest.auth import CallbackAuth, build_ssl_context
from subscriber.ingest.hooks import DrainHook
from subscriber.ingest.http import CallbackIngress, make_app
from subscriber.ingest.kafka import KafkaSource, build_kafka_source
from subscriber.kernel import HandlerRegistry, Services
from subscriber.lifecycle import Component
from subscriber.metrics import Metrics, install_metrics_route
from subscriber.openstack import OpenStackClient
from subscriber.retention import Pruner
from subscriber.runner import Runner
from subscriber.ssh import SshPool
from subscriber.store import Store
from subscriber.tacker import EchoFilter, Reconciler, SubscriptionKeeper, TackerClient

__all__ = ["Service"]

log = logging.getLogger(__name__)


def _routing_summary(registry: HandlerRegistry, settings: Settings, missing: list[str]) -> str:
    """One line: which operations are handled, and what is only recorded (and why)."""
    handled: dict[str, list[str]] = {}
    for operation, state, name in registry.routes():
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


class Service(Component):
    """The whole service; start order store -> owned clients -> dispatcher -> ingress (HTTP,
    Kafka) -> subscription keeper -> reconciler, stop in reverse (the dispatcher drains
    its lanes up to ``dispatch.graceful_timeout``).

    Arguments:
        settings: the effective configuration.
        registry: handler routes (defaults to the built-in registry plus
            ``settings.handlers.modules``).
        services: clients handed to steps; each one set wins over the service's own
            (which is then neither built nor started).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        registry: HandlerRegistry | None = None,
        services: Services | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.store = Store(settings.database)
        # Its own registry per Service (never the global one); /metrics serves it.
        self.metrics = Metrics()
        self.store.events.add_observer(self.metrics.observe_appends)
        # The clients steps use. Ours start and stop with the service; those the
        # caller hands in (and which win over ours) are the caller's to manage.
        given = services or Services()
        self.ssh = SshPool(settings.ssh) if given.ssh is None else None
        self.openstack: OpenStackClient | None = None
        if given.openstack is None and settings.openstack.enabled:
            self.openstack = OpenStackClient(settings.openstack)
        self.tacker: TackerClient | None = None
        if given.tacker is None and settings.tacker.configured:
            self.tacker = TackerClient(settings.tacker, echo=self.store.tacker)
        own = Services(
            ssh=self.ssh,
            tacker=self.tacker,
            openstack=self.openstack,
            inventory=self.store.inventory,
            values=self.store.tacker,
        )
        self.services = own.merged(given)
        self._owned: list[Any] = [c for c in (self.ssh, self.openstack, self.tacker) if c]
        configured = self.services.configured()
        missing = sorted({"tacker", "openstack"} - configured)
        if settings.cluster.handlers == "on" and missing and registry is None:
            raise ConfigError(
                f"cluster.handlers is on but {' and '.join(missing)} is not configured: set "
                + ", ".join(f"{m}.*" for m in missing)
                + " or cluster.handlers: auto"
            )
        self.registry = registry or registry_for(settings, configured)
        self._routing_line = _routing_summary(self.registry, settings, missing)
        self.echo = EchoFilter(self.store.tacker, settings.tacker, self.tacker)
        self.runner = Runner(
            self.store,
            self.registry,
            settings.dispatch,
            self.services,
            metrics=self.metrics,
            echo=self.echo,
        )
        self.dispatcher = Dispatcher(self.store, self.runner, settings.dispatch, self.metrics)
        self.pruner: Pruner | None = (
            Pruner(self.store, settings.retention) if settings.retention.enabled else None
        )
        hook_path = settings.hooks.path if settings.hooks.bearer() else None
        self.app = make_app(settings.http, self.store.events, hook_path=hook_path)
        # Components add readiness checks here (Kafka assigned, subscription present ...).
        self.health = Health(self.store)
        self.health.install(self.app)
        install_metrics_route(self.app, self.metrics, self.store)
        self.auth = CallbackAuth(settings.auth, settings.http.path, self.metrics)
        self.auth.install(self.app)
        self.hooks = DrainHook(settings.hooks, self.store, wake=self.dispatcher.poke)
        self.hooks.install(self.app)
        self.ingress = CallbackIngress(
            settings.http, self.app, ssl_context=build_ssl_context(settings.auth)
        )
        # Only when kafka.bootstrap_servers is configured.
        self.kafka: KafkaSource | None = build_kafka_source(settings, self.store.events)
        if self.kafka is not None:
            self._observe_kafka(self.kafka)
        self.subscriptions: SubscriptionKeeper | None = None
        self.reconciler: Reconciler | None = None
        if self.tacker is not None and settings.tacker.subscribe_on_start:
            self.subscriptions = SubscriptionKeeper(self.tacker, settings)
            self.health.register("subscription", self.subscriptions.readiness)
        if self.tacker is not None and settings.tacker.reconcile_interval > 0:
            keeper = self.subscriptions
            self.reconciler = Reconciler(
                self.store,
                self.tacker,
                settings.tacker,
                subscription_id=lambda: keeper.subscription_id if keeper else None,
            )

    def _observe_kafka(self, kafka: KafkaSource) -> None:
        """Kafka readiness in /readyz and its lag in ``lccn_consumer_lag``."""

        async def ready() -> CheckResult:
            # A failed source (its consumer task died) says why.
            detail = "" if kafka.ready else kafka.failure or "consumer not ready"
            return CheckResult(kafka.ready, detail)

        def lag() -> None:
            for (topic, partition), behind in kafka.lag().items():
                self.metrics.consumer_lag.labels(topic, str(partition)).set(behind)

        self.health.register("kafka", ready)
        self.metrics.add_scrape_hook(lag)

    @property
    def port(self) -> int | None:
        return self.ingress.port

    async def _start(self) -> None:
        await self._start_child(self.store)
        for client in self._owned:
            await self._start_child(client)
        if self.settings.dispatch.enabled:
            await self._start_child(self.dispatcher)
        if self.pruner is not None:
            await self._start_child(self.pruner)
        await self._start_child(self.ingress)
        if self.kafka is not None:
            # Returns at once; connecting and joining the group go on in
            # the background (a broker that is down only delays ingest).
            await self._start_child(self.kafka)
        # After ingress: Tacker tests the callback with a GET while subscribing.
        if self.subscriptions is not None:
            await self._start_child(self.subscriptions)
        if self.reconciler is not None:
            await self._start_child(self.reconciler)
        log.info(self._routing_line)

    async def serve_forever(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (SIGTERM/SIGINT in the CLI)."""
        async with self:
            frozen = freeze_long_lived()
            log.debug("moved %d start-up objects out of the collector's reach", frozen)
            await stop.wait()
            log.info(
                "stopping", extra={"graceful_timeout": self.settings.dispatch.graceful_timeout}
            )
