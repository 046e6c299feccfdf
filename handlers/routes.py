"""The routing table: which handler serves which (operation, operationState).

The one place that says what runs for what; ``lccn-subscriber handlers list``
prints it with each handler's steps. Modules named in ``handlers.modules`` are
registered first and win: a route they took is left to them. Whatever no route
claims goes to the ``log`` handler (op-occ notifications only).
"""

from __future__ import annotations

from collections.abc import Collection

from handlers.drain import DrainLeaving
from handlers.heal import HealCluster
from handlers.instantiate import InstantiateCluster, ValidateInstantiate
from handlers.log import LogHandler
from handlers.scale import ScaleCluster
from handlers.terminate import TerminateCluster
from handlers.validate import ValidateParams
from subscriber.config import ClusterSettings, Settings
from subscriber.kernel import HandlerRegistry, Route

__all__ = ["cluster_routes", "default_registry", "registry_for", "services_configured"]


def cluster_routes(settings: ClusterSettings | None = None) -> tuple[Route, ...]:
    """The cluster operations' routes."""
    settings = settings or ClusterSettings()
    drain = DrainLeaving(settings)  # the drain hook's work: see subscriber/ingest/hooks.py
    return (
        Route("INSTANTIATE", "STARTING", ValidateInstantiate(settings)),
        Route("INSTANTIATE", "COMPLETED", InstantiateCluster(settings)),
        Route("SCALE", "STARTING", ValidateParams("cluster-scale-validate", settings)),
        Route("SCALE", "PROCESSING", drain),
        Route("SCALE", "COMPLETED", ScaleCluster(settings)),
        Route("HEAL", "STARTING", ValidateParams("cluster-heal-validate", settings)),
        Route("HEAL", "PROCESSING", drain),
        Route("HEAL", "COMPLETED", HealCluster(settings)),
        Route("TERMINATE", "COMPLETED", TerminateCluster(settings)),
    )


def default_registry(
    extra_modules: tuple[str, ...] = (),
    *,
    cluster: ClusterSettings | None = None,
    cluster_handlers: bool = False,
) -> HandlerRegistry:
    """The registry ``serve`` uses: configured modules, the cluster routes, then ``log``.

    Arguments:
        extra_modules: modules whose ``register(registry)`` is called first.
        cluster: the ``cluster`` settings handed to the cluster handlers.
        cluster_handlers: add :func:`cluster_routes`.

    Raises:
        ConfigError: a module cannot be imported or has no ``register``.
    """
    registry = HandlerRegistry()
    registry.load_modules(extra_modules)
    if cluster_handlers:
        registry.add_routes(cluster_routes(cluster))
    registry.add_routes((Route(None, None, LogHandler()),))
    return registry


def services_configured(settings: Settings) -> frozenset[str]:
    """The clients ``serve`` builds from ``settings`` (``tacker``, ``openstack``)."""
    names = {"tacker"} if settings.tacker.configured else set()
    if settings.openstack.enabled:
        names.add("openstack")
    return frozenset(names)


def registry_for(settings: Settings, configured: Collection[str]) -> HandlerRegistry:
    """What ``serve`` routes: the cluster routes when ``cluster.handlers`` is ``on``, or
    ``auto`` with both Tacker and OpenStack among the ``configured`` clients.

    Raises:
        ConfigError: a handler module cannot be imported or has no ``register``.
    """
    mode = settings.cluster.handlers
    cluster_on = mode == "on" or (mode == "auto" and {"tacker", "openstack"} <= set(configured))
    return default_registry(
        settings.handlers.modules, cluster=settings.cluster, cluster_handlers=cluster_on
    )
