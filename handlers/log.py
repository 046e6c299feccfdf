"""The built-in ``log`` handler: records the event in the log and the job's steps.

Routed for every op-occ transition that no cluster handler claims, so every
received transition leaves a job trail (and the spine can be exercised alone).
"""

from __future__ import annotations

from typing import Any

from schemas import Notification, VnfLcmOperationOccurrenceNotification
from subscriber.kernel import JobContext, Plan, Step

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

    def plan(self, notification: Notification) -> Plan:
        return Plan((Step("record", _record, idempotent=True, timeout=10.0),))
