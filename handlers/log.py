"""The built-in ``log`` handler: records the event in the log and the job's steps.

Routed for every op-occ transition that no cluster handler claims, so every
received transition leaves a job trail (and the spine can be exercised alone).
"""

from __future__ import annotations

from typing import Any

from handlers.base import JobContext, Plan, Step
from schemas import VnfLcmOperationOccurrenceNotification

__all__ = ["LogHandler"]


async def _record(ctx: JobContext) -> dict[str, Any]:
    n = ctx.notification
    summary: dict[str, Any] = {"notificationType": n.notificationType.value}
    if isinstance(n, VnfLcmOperationOccurrenceNotification):
        summary.update(
            operation=n.operation.value,
            operationState=n.operationState.value,
            vnfLcmOpOccId=n.vnfLcmOpOccId,
        )
    ctx.log.info("lifecycle event", extra={"lcm": summary})
    return summary


class LogHandler:
    name = "log"

    async def plan(self, ctx: JobContext) -> Plan:
        return Plan((Step("record", _record, idempotent=True, timeout=10.0),))
