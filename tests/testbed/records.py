"""The notifications the Kafka tier and the Kafka bench put on a topic: SOL003 v2 op-occ
notifications (SHORT), as a relay or Tacker's Kafka path would carry them."""

from __future__ import annotations

import uuid
from typing import Any

__all__ = ["STATES", "notification", "transitions"]

# An op-occ's transitions in order, with the notificationStatus each carries.
STATES = (
    ("STARTING", "START"),
    ("PROCESSING", "START"),
    ("COMPLETED", "RESULT"),
)


def notification(
    vnf: str,
    op_occ: str,
    state: str = "STARTING",
    status: str = "START",
    *,
    operation: str = "INSTANTIATE",
) -> dict[str, Any]:
    """A valid SOL003 v2 VnfLcmOperationOccurrenceNotification (SHORT)."""
    base = "http://127.0.0.1:9890/vnflcm/v2"
    return {
        "id": str(uuid.uuid4()),
        "notificationType": "VnfLcmOperationOccurrenceNotification",
        "subscriptionId": "sub-1",
        "timeStamp": "2025-01-01T00:00:00Z",
        "notificationStatus": status,
        "operationState": state,
        "vnfInstanceId": vnf,
        "operation": operation,
        "isAutomaticInvocation": False,
        "vnfLcmOpOccId": op_occ,
        "verbosity": "SHORT",
        "_links": {
            "vnfInstance": {"href": f"{base}/vnf_instances/{vnf}"},
            "subscription": {"href": f"{base}/subscriptions/sub-1"},
            "vnfLcmOpOcc": {"href": f"{base}/vnf_lcm_op_occs/{op_occ}"},
        },
    }


def transitions(count: int, *, instances: int = 50) -> list[dict[str, Any]]:
    """``count`` distinct transitions spread over ``instances`` VNF instances: each op-occ's
    three (:data:`STATES`) in order, every VNF instance taking one op-occ after another."""
    run = uuid.uuid4().hex[:8]
    out = []
    for i in range(count):
        vnf = f"vnf-{run}-{i % instances}"
        state, status = STATES[i % 3]
        out.append(notification(vnf, f"opocc-{run}-{i // 3}", state, status))
    return out
