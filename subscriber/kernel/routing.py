"""Routing: (operation, operationState) -> handler, and what a handler is.

A handler turns one event into a :class:`~subscriber.kernel.plan.Plan`; its
``plan`` is pure (no I/O, see :mod:`subscriber.kernel.plan`). Routes are keyed
by the SOL003 enums (:class:`~schemas.LcmOperationType`,
:class:`~schemas.LcmOperationStateType`): a name that is not one of them is an
error when the table is built, never a silent fall-through. Exact routes win
over wildcard ones (``None`` matches any operation or state); identifier
notifications route on their notificationType as the operation
(:class:`~schemas.NotificationType`), take no state, and never match a wildcard
operation.
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from schemas import (
    LcmOperationStateType,
    LcmOperationType,
    Notification,
    NotificationType,
    VnfLcmOperationOccurrenceNotification,
    parse_notification_data,
)
from subscriber.errors import ConfigError
from subscriber.kernel.plan import Plan

__all__ = [
    "Handler",
    "Operation",
    "Route",
    "RouteInfo",
    "RoutingTable",
    "route_key",
    "sample_notification",
]

# What a route names as its operation: an op-occ's operation, or an identifier
# notification's type.
Operation = LcmOperationType | NotificationType
_Key = tuple[Operation | None, LcmOperationStateType | None]


def _operation(value: Operation | str | None) -> Operation | None:
    if value is None or isinstance(value, (LcmOperationType, NotificationType)):
        return value
    for kind in (LcmOperationType, NotificationType):
        try:
            return kind(value)
        except ValueError:
            continue
    raise ValueError(
        f"unknown operation {value!r}: one of {', '.join(LcmOperationType)}, or an "
        f"identifier notification type ({NotificationType.CREATION}, {NotificationType.DELETION})"
    )


def _state(value: LcmOperationStateType | str | None) -> LcmOperationStateType | None:
    if value is None or isinstance(value, LcmOperationStateType):
        return value
    try:
        return LcmOperationStateType(value)
    except ValueError:
        raise ValueError(
            f"unknown operation state {value!r}: one of {', '.join(LcmOperationStateType)}"
        ) from None


def _key(operation: Operation | str | None, state: LcmOperationStateType | str | None) -> _Key:
    op, st = _operation(operation), _state(state)
    if op is NotificationType.OP_OCC:
        raise ValueError(f"route op-occ notifications by their operation, not by {op.value!r}")
    if isinstance(op, NotificationType) and st is not None:
        raise ValueError(f"{op.value} has no operation state: route it without one")
    return op, st


class Handler(Protocol):
    """Turns one event into a plan, without I/O."""

    name: str

    def plan(self, notification: Notification) -> Plan: ...


@dataclass(frozen=True, slots=True)
class Route:
    """One row of a routing table: ``handler`` serves ``(operation, state)``.

    Raises:
        ValueError: ``operation`` or ``state`` is not a SOL003 name.
    """

    operation: Operation | None
    state: LcmOperationStateType | None
    handler: Handler

    def __init__(
        self,
        operation: Operation | str | None,
        state: LcmOperationStateType | str | None,
        handler: Handler,
    ) -> None:
        op, st = _key(operation, state)
        object.__setattr__(self, "operation", op)
        object.__setattr__(self, "state", st)
        object.__setattr__(self, "handler", handler)


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


def route_key(notification: Notification) -> tuple[Operation, LcmOperationStateType | None]:
    if isinstance(notification, VnfLcmOperationOccurrenceNotification):
        return notification.operation, notification.operationState
    return notification.notificationType, None


def sample_notification(
    operation: Operation | None, state: LcmOperationStateType | None
) -> Notification:
    """A v2 notification of ``(operation, state)``, to show what a handler would plan.

    Wildcards take INSTANTIATE / COMPLETED (what a wildcard route serves most).
    """
    instance = "00000000-0000-0000-0000-000000000000"
    links = {"vnfInstance": {"href": f"/vnflcm/v2/vnf_instances/{instance}"}}
    now = dt.datetime.now(dt.UTC).isoformat()
    if isinstance(operation, NotificationType):
        return parse_notification_data(
            {
                "id": "sample",
                "notificationType": operation.value,
                "subscriptionId": "sample",
                "timeStamp": now,
                "vnfInstanceId": instance,
                "_links": {**links, "subscription": {"href": "/s"}},
            }
        )
    state = state or LcmOperationStateType.COMPLETED
    operation = operation or LcmOperationType.INSTANTIATE
    return parse_notification_data(
        {
            "id": "sample",
            "notificationType": "VnfLcmOperationOccurrenceNotification",
            "subscriptionId": "sample",
            "timeStamp": now,
            "notificationStatus": "START" if state == "STARTING" else "RESULT",
            "operationState": state.value,
            "vnfInstanceId": instance,
            "operation": operation.value,
            "isAutomaticInvocation": False,
            "vnfLcmOpOccId": "sample",
            "_links": {
                **links,
                "subscription": {"href": "/s"},
                "vnfLcmOpOcc": {"href": "/vnflcm/v2/vnf_lcm_op_occs/sample"},
            },
        }
    )


class RoutingTable:
    """The routing table of one process: which handler serves which (operation, state)."""

    def __init__(self) -> None:
        self._routes: dict[_Key, Handler] = {}

    def register(
        self,
        handler: Handler,
        *,
        operation: Operation | str | None = None,
        state: LcmOperationStateType | str | None = None,
    ) -> None:
        """Route ``(operation, state)`` to ``handler``; ``None`` is a wildcard.

        Raises:
            ValueError: ``operation`` or ``state`` is not a SOL003 name, or that exact
                route is already taken.
        """
        key = _key(operation, state)
        if key in self._routes:
            shown = tuple(k.value if k is not None else "*" for k in key)
            raise ValueError(f"route {shown} already has handler {self._routes[key].name!r}")
        self._routes[key] = handler

    def add_routes(self, routes: Iterable[Route]) -> None:
        """Register each route whose exact ``(operation, state)`` is still free."""
        for route in routes:
            if self.route_taken(route.operation, route.state) is None:
                self.register(route.handler, operation=route.operation, state=route.state)

    def route_taken(
        self, operation: Operation | str | None, state: LcmOperationStateType | str | None
    ) -> Handler | None:
        """The handler on exactly this route, if any."""
        return self._routes.get(_key(operation, state))

    def route(self, notification: Notification) -> Handler | None:
        """The handler that serves ``notification``, if any."""
        return self.handler_for(*route_key(notification))

    def handler_for(
        self, operation: Operation | str, state: LcmOperationStateType | str | None
    ) -> Handler | None:
        """The handler that serves ``(operation, state)``: the exact route, else the
        best wildcard (identifier notifications take no wildcard)."""
        op, st = _key(operation, state)
        for key in ((op, st), (op, None), (None, st), (None, None)):
            handler = self._routes.get(key)
            if handler is not None:
                if key[0] is None and isinstance(op, NotificationType):
                    continue  # wildcards are for op-occ notifications only
                return handler
        return None

    def routes(self) -> list[tuple[str | None, str | None, str]]:
        """``(operation, state, handler name)`` per route, ``None`` for a wildcard."""
        return [
            (op.value if op else None, st.value if st else None, h.name)
            for (op, st), h in self._routes.items()
        ]

    def table(self) -> list[RouteInfo]:
        """Every route with the steps its handler plans, exact routes first.

        Steps made from an earlier step's result show as their pattern
        (``join-master-<node>``).
        """

        def order(key: _Key) -> tuple[int, str, str]:
            op, st = key
            return ((op is None) + (st is None), op or "~", st or "~")

        rows = []
        for key in sorted(self._routes, key=order):
            handler = self._routes[key]
            plan = handler.plan(sample_notification(*key))
            op, st = key
            rows.append(
                RouteInfo(
                    op.value if op else None,
                    st.value if st else None,
                    handler.name,
                    tuple(plan.outline()),
                )
            )
        return rows

    def load_modules(self, modules: Iterable[str]) -> None:
        """Import each module and call its ``register(table)``.

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
                raise ConfigError(f"handler module {name!r} has no register(table) function")
            try:
                register(self)
            except ValueError as exc:
                raise ConfigError(f"handler module {name!r}: {exc}") from exc
