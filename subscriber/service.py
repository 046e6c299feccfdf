"""Assembles one lccn-subscriber process: store, runner, dispatcher, ingress."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from handlers import HandlerRegistry, default_registry
from subscriber.config import Settings
from subscriber.dispatcher import Dispatcher
from subscriber.ingest.http import CallbackIngress, make_app
from subscriber.ingest.kafka import KafkaSource, build_kafka_source
from subscriber.runner import Runner
from subscriber.store import Store

__all__ = ["Service"]

log = logging.getLogger(__name__)


class _State(enum.Enum):
    UNOPENED = "unopened"
    RUNNING = "running"
    STOPPED = "stopped"


class Service:
    """The whole service; start order store -> dispatcher -> ingress (HTTP, Kafka), stop in reverse.

    Arguments:
        settings: the effective configuration.
        registry: handler routes (defaults to the built-in registry plus
            ``settings.handlers.modules``).
        services: clients handed to steps (ssh, tacker, openstack ...).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        registry: HandlerRegistry | None = None,
        services: Mapping[str, Any] | None = None,
    ) -> None:
        self.settings = settings
        self.store = Store(settings.database)
        self.registry = registry or default_registry(settings.handlers.modules)
        self.runner = Runner(self.store, self.registry, settings.dispatch, services)
        self.dispatcher = Dispatcher(self.store, self.runner, settings.dispatch)
        self.app = make_app(settings.http, self.store.events)
        self.ingress = CallbackIngress(settings.http, self.app)
        # Only when kafka.bootstrap_servers is configured.
        self.kafka: KafkaSource | None = build_kafka_source(settings, self.store.events)
        self._state = _State.UNOPENED

    @property
    def port(self) -> int | None:
        return self.ingress.port

    async def start(self) -> None:
        if self._state is not _State.UNOPENED:
            raise RuntimeError(f"Service cannot start: it is {self._state.value}")
        self._state = _State.RUNNING
        try:
            await self.store.start()
            if self.settings.dispatch.enabled:
                await self.dispatcher.start()
            await self.ingress.start()
            if self.kafka is not None:
                # Returns at once; connecting and joining the group go on in
                # the background (a broker that is down only delays ingest).
                await self.kafka.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop intake, drain lanes up to the grace period, then close the store."""
        if self._state is _State.STOPPED:
            return
        self._state = _State.STOPPED
        if self.kafka is not None:
            await self.kafka.stop()
        await self.ingress.stop()
        await self.dispatcher.stop()
        await self.store.stop()

    async def __aenter__(self) -> Service:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def serve_forever(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (SIGTERM/SIGINT in the CLI)."""
        async with self:
            await stop.wait()
            log.info(
                "stopping", extra={"graceful_timeout": self.settings.dispatch.graceful_timeout}
            )
