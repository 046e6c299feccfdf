"""The cluster work: one module per LCM operation, built from small named steps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from handlers.base import Handler, JobContext, Plan, RetryClass, SkipStep, Step
from handlers.log import LogHandler
from handlers.registry import HandlerRegistry, route_key

if TYPE_CHECKING:
    from subscriber.config import ClusterSettings

__all__ = [
    "Handler",
    "HandlerRegistry",
    "JobContext",
    "LogHandler",
    "Plan",
    "RetryClass",
    "SkipStep",
    "Step",
    "default_registry",
    "register_cluster_handlers",
    "route_key",
]


def default_registry(
    extra_modules: tuple[str, ...] = (),
    *,
    cluster: ClusterSettings | None = None,
    cluster_handlers: bool = False,
) -> HandlerRegistry:
    """The registry ``serve`` uses: configured modules, the cluster handlers, then ``log``.

    Arguments:
        extra_modules: modules whose ``register(registry)`` is called first
            (their routes win: a cluster route they took is left to them).
        cluster: the ``cluster`` settings handed to the cluster handlers.
        cluster_handlers: register INSTANTIATE (STARTING, COMPLETED) and
            TERMINATE (COMPLETED).
    """
    registry = HandlerRegistry()
    registry.load_modules(extra_modules)
    if cluster_handlers:
        register_cluster_handlers(registry, cluster)
    if registry.route_taken(None, None) is None:
        registry.register(LogHandler())  # wildcard: only what nothing else claims
    return registry


def register_cluster_handlers(
    registry: HandlerRegistry, settings: ClusterSettings | None = None
) -> None:
    """Route the cluster operations to their handlers (routes already taken are kept)."""
    from handlers.instantiate import InstantiateCluster, ValidateInstantiate
    from handlers.terminate import TerminateCluster

    routes: list[tuple[str, str, Handler]] = [
        ("INSTANTIATE", "STARTING", ValidateInstantiate(settings)),
        ("INSTANTIATE", "COMPLETED", InstantiateCluster(settings)),
        ("TERMINATE", "COMPLETED", TerminateCluster(settings)),
    ]
    for operation, state, handler in routes:
        if registry.route_taken(operation, state) is None:
            registry.register(handler, operation=operation, state=state)
