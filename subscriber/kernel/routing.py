"""Routing: (operation, operationState) -> handler, and what a handler is.

A handler turns one event into a :class:`~subscriber.kernel.plan.Plan`; its
``plan`` is pure (no I/O, see :mod:`subscriber.kernel.plan`). Exact routes win
over wildcard ones (``None`` matches any operation or state); identifier
notifications route on their notificationType as the operation and never match
a wildcard operation.
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from schemas import Notification, VnfLcmOperationOccurrenceNotification, parse_notification_data
from subscriber.errors import ConfigError
from subscriber.kernel.plan import Plan

__all__ = [
    "Handler",
    "HandlerRegistry",
    "Route",
    "RouteInfo",
    "route_key",
    "sample_notification",
]


class Handler(Protocol):
    """Turns one event into a plan, without I/O."""

    name: str

    def plan(self, notification: Notification) -> Plan: ...


@dataclass(frozen=True, slots=True)
class Route:
    """One row of a routing table: ``handler`` serves ``(operation, state)``."""

    operation: str | None
    state: str | None
    handler: Handler


@dataclass(frozen=True, slots=True)
class RouteInfo:
    """A route as ``lccn-subscriber handlers list`` shows it."""

    operation: str | None
    state: str | None
    handler: str
    steps: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "operation": self.operation or "*",
            "state": self.state or "*",
            "handler": self.handler,
            "steps": list(self.steps),
        }


def route_key(notification: Notification) -> tuple[str, str | None]:
    if isinstance(notification, VnfLcmOperationOccurrenceNotification):
        return notification.operation.value, notification.operationState.value
    return notification.notificationType.value, None


def sample_notification(operation: str | None, state: str | None) -> Notification:
    """A v2 notification of ``(operation, state)``, to show what a handler would plan.

    Wildcards take INSTANTIATE / COMPLETED (what a wildcard route serves most).
    """
    instance = "00000000-0000-0000-0000-000000000000"
    links = {"vnfInstance": {"href": f"/vnflcm/v2/vnf_instances/{instance}"}}
    now = dt.datetime.now(dt.UTC).isoformat()
    if operation is not None and operation.startswith("VnfIdentifier"):
        return parse_notification_data(
            {
                "id": "sample",
                "notificationType": operation,
                "subscriptionId": "sample",
                "timeStamp": now,
                "vnfInstanceId": instance,
                "_links": {**links, "subscription": {"href": "/s"}},
            }
        )
    state = state or "COMPLETED"
    return parse_notification_data(
        {
            "id": "sample",
            "notificationType": "VnfLcmOperationOccurrenceNotification",
            "subscriptionId": "sample",
            "timeStamp": now,
            "notificationStatus": "START" if state == "STARTING" else "RESULT",
            "operationState": state,
            "vnfInstanceId": instance,
            "operation": operation or "INSTANTIATE",
            "isAutomaticInvocation": False,
            "vnfLcmOpOccId": "sample",
            "_links": {
                **links,
                "subscription": {"href": "/s"},
                "vnfLcmOpOcc": {"href": "/vnflcm/v2/vnf_lcm_op_occs/sample"},
            },
        }
    )


class HandlerRegistry:
    """The routing table of one process."""

    def __init__(self) -> None:
        self._routes: dict[tuple[str | None, str | None], Handler] = {}

    def register(
        self, handler: Handler, *, operation: str | None = None, state: str | None = None
    ) -> None:
        """Route ``(operation, state)`` to ``handler``; ``None`` is a wildcard.

        Raises:
            ValueError: that exact route is already taken.
        """
        key = (operation, state)
        if key in self._routes:
            raise ValueError(f"route {key} already has handler {self._routes[key].name!r}")
        self._routes[key] = handler

    def add_routes(self, routes: Iterable[Route]) -> None:
        """Register each route whose exact ``(operation, state)`` is still free."""
        for route in routes:
            if self.route_taken(route.operation, route.state) is None:
                self.register(route.handler, operation=route.operation, state=route.state)

    def route_taken(self, operation: str | None, state: str | None) -> Handler | None:
        """The handler on exactly this route, if any."""
        return self._routes.get((operation, state))

    def route(self, notification: Notification) -> Handler | None:
        operation, state = route_key(notification)
        for key in ((operation, state), (operation, None), (None, state), (None, None)):
            handler = self._routes.get(key)
            if handler is not None:
                if key[0] is None and operation.startswith("VnfIdentifier"):
                    continue  # wildcards are for op-occ notifications only
                return handler
        return None

    def routes(self) -> list[tuple[str | None, str | None, str]]:
        return [(op, st, h.name) for (op, st), h in self._routes.items()]

    def table(self) -> list[RouteInfo]:
        """Every route with the steps its handler plans, exact routes first.

        Steps made from an earlier step's result show as their pattern
        (``join-master-<node>``).
        """

        def order(key: tuple[str | None, str | None]) -> tuple[int, str, str]:
            op, st = key
            return ((op is None) + (st is None), op or "~", st or "~")

        rows = []
        for key in sorted(self._routes, key=order):
            handler = self._routes[key]
            plan = handler.plan(sample_notification(*key))
            rows.append(RouteInfo(key[0], key[1], handler.name, tuple(plan.outline())))
        return rows

    def load_modules(self, modules: Iterable[str]) -> None:
        """Import each module and call its ``register(registry)``.

        Raises:
            ConfigError: a module cannot be imported or has no ``register``.
        """
        for name in modules:
            try:
                module = importlib.import_module(name)
            except ImportError as exc:
                raise ConfigError(f"handler module {name!r} cannot be imported: {exc}") from exc
            register = getattr(module, "register", None)
            if register is None:
                raise ConfigError(f"handler module {name!r} has no register(registry) function")
            register(self)
