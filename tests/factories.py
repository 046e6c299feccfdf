"""Notification bodies shaped exactly as Tacker v1 and v2 send them (TACKER.md §2-§3)."""

from __future__ import annotations

import uuid
from typing import Any

OPERATIONS = (
    "INSTANTIATE",
    "SCALE",
    "SCALE_TO_LEVEL",
    "CHANGE_FLAVOUR",
    "TERMINATE",
    "HEAL",
    "OPERATE",
    "CHANGE_EXT_CONN",
    "MODIFY_INFO",
    "CREATE_SNAPSHOT",
    "REVERT_TO_SNAPSHOT",
    "CHANGE_VNFPKG",
)
STATES = (
    "STARTING",
    "PROCESSING",
    "COMPLETED",
    "FAILED_TEMP",
    "FAILED",
    "ROLLING_BACK",
    "ROLLED_BACK",
)


def uid() -> str:
    return str(uuid.uuid4())


def v2_status(operation: str, state: str) -> str:
    """v2: START for STARTING and for MODIFY_INFO PROCESSING; RESULT otherwise."""
    if state == "STARTING" or (operation == "MODIFY_INFO" and state == "PROCESSING"):
        return "START"
    return "RESULT"


def v1_status(state: str) -> str:
    """v1: START for STARTING, PROCESSING and ROLLING_BACK; RESULT otherwise."""
    return "START" if state in ("STARTING", "PROCESSING", "ROLLING_BACK") else "RESULT"


def _occ_fields(
    api: str, instance: str, op_occ_id: str, operation: str, state: str, status: str
) -> dict[str, Any]:
    """The fields every op-occ notification of both APIs has (``api``: the API's base URL)."""
    return {
        "notificationType": "VnfLcmOperationOccurrenceNotification",
        "notificationStatus": status,
        "operationState": state,
        "vnfInstanceId": instance,
        "operation": operation,
        "isAutomaticInvocation": False,
        "vnfLcmOpOccId": op_occ_id,
        "_links": {
            "vnfInstance": {"href": f"{api}/vnf_instances/{instance}"},
            "vnfLcmOpOcc": {"href": f"{api}/vnf_lcm_op_occs/{op_occ_id}"},
        },
    }


def op_occ(
    *,
    instance: str | None = None,
    op_occ_id: str | None = None,
    operation: str = "INSTANTIATE",
    state: str = "STARTING",
    status: str | None = None,
    version: int = 2,
    verbosity: str = "FULL",
    base: str = "http://127.0.0.1:9890",
) -> dict[str, Any]:
    instance = instance or uid()
    op_occ_id = op_occ_id or uid()
    api = f"{base}/vnflcm/v{version}"
    sub = uid()
    status = status or (v2_status(operation, state) if version == 2 else v1_status(state))
    body: dict[str, Any] = {
        "id": uid(),
        "subscriptionId": sub,
        "timeStamp": "2026-11-22T03:50:00Z",
        **_occ_fields(api, instance, op_occ_id, operation, state, status),
    }
    body["_links"]["subscription"] = {"href": f"{api}/subscriptions/{sub}"}
    if version == 2:
        body["verbosity"] = verbosity
    if verbosity == "FULL" and state in ("COMPLETED", "FAILED_TEMP", "ROLLED_BACK"):
        body["affectedVnfcs"] = [
            {
                "id": uid(),
                "vduId": "masterNode",
                "changeType": "ADDED",
                "computeResource": {
                    "resourceId": uid(),
                    "vimLevelResourceType": "OS::Nova::Server",
                },
                "metadata": {"stack_id": uid()},
            }
        ]
        body["affectedVirtualLinks"] = [{"id": uid(), "vnfVirtualLinkDescId": "internalVL1"}]
    if verbosity == "FULL" and operation == "MODIFY_INFO" and state == "COMPLETED":
        body["changedInfo"] = {
            "vimConnectionInfo": {
                "k8s": {
                    "vimId": uid(),
                    "vimType": "ETSINFV.KUBERNETES.V_1",
                    "interfaceInfo": {"endpoint": "https://10.77.0.11:6443"},
                    "accessInfo": {"bearer_token": "s3cr3t-bearer-TOKEN-value"},
                }
            }
        }
    if state in ("FAILED_TEMP", "FAILED", "ROLLED_BACK"):
        body["error"] = {"status": 500, "detail": "Heat stack create failed"}
    return body


def v1_op_occ(
    *,
    instance: str | None = None,
    op_occ_id: str | None = None,
    operation: str = "INSTANTIATE",
    state: str = "COMPLETED",
    base: str = "http://127.0.0.1:9890",
    error: str | None = None,
) -> dict[str, Any]:
    """What Tacker 16.0.0's v1 conductor posts: ``_send_lcm_op_occ_notification`` builds it
    (START until a settled state; ``affected*`` and ``changedExtConnectivity`` and, on a
    failure, ``error`` as the exception's bare text), ``send_notification`` adds ``id``,
    ``subscriptionId``, ``_links.subscription`` and a ``timeStamp`` with no zone."""
    instance = instance or uid()
    op_occ_id = op_occ_id or uid()
    sub = uid()
    body = _occ_fields(f"{base}/vnflcm/v1", instance, op_occ_id, operation, state, "START")
    if state in ("COMPLETED", "FAILED_TEMP", "FAILED"):
        body["affectedVnfcs"] = [
            {
                "id": uid(),
                "vduId": "workerNode",
                "changeType": "ADDED",
                "computeResource": {
                    "vimConnectionId": uid(),
                    "resourceId": uid(),
                    "vimLevelResourceType": "OS::Nova::Server",
                },
            }
        ]
        body["notificationStatus"] = "RESULT"
        body["changedExtConnectivity"] = []
        if state != "COMPLETED":
            body["error"] = error or "Heat stack create failed"
    body["id"] = uid()
    body["subscriptionId"] = sub
    body["_links"]["subscription"] = {"href": f"{base}//vnflcm/v1/subscriptions/{sub}"}
    body["timeStamp"] = "2026-11-22T03:50:00.123456"
    return body


def identifier(
    kind: str = "Creation", *, instance: str | None = None, version: int = 2
) -> dict[str, Any]:
    instance = instance or uid()
    sub = uid()
    links = {
        "vnfInstance": {"href": f"http://127.0.0.1:9890/vnflcm/v2/vnf_instances/{instance}"},
        "subscription": {"href": f"http://127.0.0.1:9890/vnflcm/v2/subscriptions/{sub}"},
    }
    return {
        "id": uid(),
        "notificationType": f"VnfIdentifier{kind}Notification",
        "subscriptionId": sub,
        "timeStamp": "2026-11-22T03:50:00Z",
        "vnfInstanceId": instance,
        ("_links" if version == 2 else "links"): links,
    }
