"""The cluster work: one module per LCM operation, plans built from shared steps.

* :mod:`handlers.routes`: the routing table (which handler serves what).
* :mod:`handlers.instantiate`, :mod:`handlers.terminate`, :mod:`handlers.log`:
  the operations, each a pure plan.
* :mod:`handlers.steps`: the named, checkpointed steps the plans share.
* :mod:`handlers.toolkit`: the node operations those steps are made of.

Handler authors import the kernel (``Plan``, ``Step``, ``JobContext``,
``RoutingTable`` ...) from :mod:`subscriber.kernel`.
"""

from handlers.routes import cluster_routes, default_routing, routing_for, services_configured

__all__ = ["cluster_routes", "default_routing", "routing_for", "services_configured"]
