"""The cluster work: one module per LCM operation, built from small named steps."""

from handlers.base import Handler, JobContext, Plan, RetryClass, SkipStep, Step
from handlers.log import LogHandler
from handlers.registry import HandlerRegistry, route_key

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
    "route_key",
]


def default_registry(extra_modules: tuple[str, ...] = ()) -> HandlerRegistry:
    """The registry ``serve`` uses: built-in handlers plus configured modules."""
    registry = HandlerRegistry()
    registry.load_modules(extra_modules)
    if registry.route_taken(None, None) is None:
        registry.register(LogHandler())  # wildcard: only what nothing else claims
    return registry
