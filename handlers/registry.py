"""Routing: (operation, operationState) -> handler.

Exact routes win over wildcard ones (``None`` matches any operation or state).
Identifier notifications route on their notificationType as the operation.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from handlers.base import Handler
from schemas import Notification, VnfLcmOperationOccurrenceNotification

__all__ = ["HandlerRegistry", "route_key"]


def route_key(notification: Notification) -> tuple[str, str | None]:
    if isinstance(notification, VnfLcmOperationOccurrenceNotification):
        return notification.operation.value, notification.operationState.value
    return notification.notificationType.value, None


class HandlerRegistry:
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

    def load_modules(self, modules: Iterable[str]) -> None:
        """Import each module and call its ``register(registry)``."""
        for name in modules:
            module = importlib.import_module(name)
            register = getattr(module, "register", None)
            if register is None:
                raise ValueError(f"handler module {name!r} has no register(registry) function")
            register(self)
