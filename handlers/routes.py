"""The routing table: which handler serves which (operation, operationState).

The one place that says what runs for what; ``lccn-subscriber handlers list``
prints it with each handler's steps. Modules named in ``handlers.modules`` are
registered first and win: a route they took is left to them. Whatever no route
claims goes to the ``log`` handler (op-occ notifications only).
"""

from __future__ import annotations

from collections.abc import Collection

from handlers.log import LogHandler
from schemas import LcmOperationStateType as State
from schemas import LcmOperationType as Op
from subscriber.config import ClusterSettings, Settings
from subscriber.kernel import Route, RoutingTable

__all__ = ["cluster_routes", "default_routing", "routing_for", "services_configured"]


def cluster_routes(settings: ClusterSettings | None = None) -> tuple[Route, ...]:
    """The cluster operations' routes."""
    # Imported here: the cluster handlers, their steps and node toolkit (~3 MB a
    # process) stay out of a serve that only records (cluster handlers off).
    from handlers.drain import DrainLeaving
    from handlers.heal import HealCluster
    from handlers.instantiate import InstantiateCluster, ValidateInstantiate
    from handlers.rollback import RollbackInstantiate, RollbackScale
    from handlers.scale import ScaleCluster
    from handlers.terminate import TerminateCluster
    from handlers.validate import ValidateParams

    settings = settings or ClusterSettings()
    # The hooks' points run these same routes' jobs (schemas/hooks.py): scale_start and
    # heal_start the drain, the *_end points and terminate_start COMPLETED's, the
    # *_rollback_start points ROLLING_BACK's.
    drain = DrainLeaving(settings)
    return (
        Route(Op.INSTANTIATE, State.STARTING, ValidateInstantiate(settings)),
        Route(Op.INSTANTIATE, State.COMPLETED, InstantiateCluster(settings)),
        Route(Op.INSTANTIATE, State.ROLLING_BACK, RollbackInstantiate(settings)),
        Route(Op.SCALE, State.STARTING, ValidateParams("cluster-scale-validate", settings)),
        Route(Op.SCALE, State.PROCESSING, drain),
        Route(Op.SCALE, State.COMPLETED, ScaleCluster(settings)),
        Route(Op.SCALE, State.ROLLING_BACK, RollbackScale(settings)),
        Route(Op.HEAL, State.STARTING, ValidateParams("cluster-heal-validate", settings)),
        Route(Op.HEAL, State.PROCESSING, drain),
        Route(Op.HEAL, State.COMPLETED, HealCluster(settings)),
        Route(Op.TERMINATE, State.COMPLETED, TerminateCluster(settings)),
    )


def default_routing(
    extra_modules: tuple[str, ...] = (),
    *,
    cluster: ClusterSettings | None = None,
    cluster_handlers: bool = False,
) -> RoutingTable:
    """The routing ``serve`` uses: configured modules, the cluster routes, then ``log``.

    Arguments:
        extra_modules: modules whose ``register(routing)`` is called first.
        cluster: the ``cluster`` settings handed to the cluster handlers.
        cluster_handlers: add :func:`cluster_routes`.

    Raises:
        ConfigError: a module cannot be imported or has no ``register``.
    """
    routing = RoutingTable()
    routing.load_modules(extra_modules)
    if cluster_handlers:
        routing.add_routes(cluster_routes(cluster))
    routing.add_routes((Route(None, None, LogHandler()),))
    return routing


def services_configured(settings: Settings) -> frozenset[str]:
    """The clients ``serve`` builds from ``settings`` (``tacker``, ``openstack``)."""
    names = {"tacker"} if settings.tacker.configured else set()
    if settings.openstack.enabled:
        names.add("openstack")
    return frozenset(names)


def routing_for(settings: Settings, configured: Collection[str]) -> RoutingTable:
    """What ``serve`` routes: the cluster routes when ``cluster.handlers`` is ``on``, or
    ``auto`` with both Tacker and OpenStack among the ``configured`` clients.

    Raises:
        ConfigError: a handler module cannot be imported or has no ``register``.
    """
    mode = settings.cluster.handlers
    cluster_on = mode == "on" or (mode == "auto" and {"tacker", "openstack"} <= set(configured))
    return default_routing(
        settings.handlers.modules, cluster=settings.cluster, cluster_handlers=cluster_on
    )
