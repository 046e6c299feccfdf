"""The handler kernel: plan and step types, the job context, routing, and the ports.

It sits below the store and the adapters (which implement its ports) and above
only ``schemas``, ``config`` and ``errors``; ``handlers`` and handler modules
build on it.
"""

from subscriber.errors import SkipStep
from subscriber.kernel.context import JobContext, Services
from subscriber.kernel.plan import Plan, PlanItem, RetryClass, Step, StepFunc, StepsFor
from subscriber.kernel.results import StepResult
from subscriber.kernel.routing import Handler, Route, RouteInfo, RoutingTable, route_key

__all__ = [
    "Handler",
    "JobContext",
    "Plan",
    "PlanItem",
    "RetryClass",
    "Route",
    "RouteInfo",
    "RoutingTable",
    "Services",
    "SkipStep",
    "Step",
    "StepFunc",
    "StepResult",
    "StepsFor",
    "route_key",
]
