"""Test handlers that record what ran, in order, with real steps and checkpoints."""

from __future__ import annotations

import asyncio
from typing import Any

from schemas import Notification, VnfLcmOperationOccurrenceNotification
from subscriber.kernel import JobContext, Plan, RoutingTable, Step


class Recorder:
    """Records every run as (instance, op-occ, state); notices overlapping runs per instance."""

    name = "recorder"

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.runs: list[tuple[str, str, str]] = []
        self.running: set[str] = set()
        self.overlaps = 0
        self.max_parallel = 0
        self.changed = asyncio.Event()

    def plan(self, notification: Notification) -> Plan:
        async def record(ctx: JobContext) -> dict[str, Any]:
            n = ctx.notification
            assert isinstance(n, VnfLcmOperationOccurrenceNotification)
            if n.vnfInstanceId in self.running:
                self.overlaps += 1
            self.running.add(n.vnfInstanceId)
            self.max_parallel = max(self.max_parallel, len(self.running))
            try:
                await asyncio.sleep(self.delay)
                self.runs.append((n.vnfInstanceId, n.vnfLcmOpOccId, n.operationState.value))
            finally:
                self.running.discard(n.vnfInstanceId)
                self.changed.set()
            return {"state": n.operationState.value}

        return Plan((Step("record", record),))

    async def wait_for(self, count: int, timeout: float = 20.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.runs) < count:
                self.changed.clear()
                await self.changed.wait()


def registry_with(handler: Any) -> RoutingTable:
    registry = RoutingTable()
    registry.register(handler)
    return registry
