"""TERMINATE / COMPLETED: undo what INSTANTIATE registered (Tacker's v1 ``terminate_end``).

The VMs are gone by now, so nothing runs on them. The plan::

    delete-vim          the VIM we registered, if any (by the name INSTANTIATE used)
    clear-write-back    v1 only: remove our vimConnectionInfo entry. Tacker v2
                        resets vimConnectionInfo itself at TERMINATE and refuses a
                        PATCH during and after it, so nothing is sent there.
    forget-inventory    drop the instance's cluster inventory
"""

from __future__ import annotations

from typing import Any

from handlers.toolkit.params import api_version
from schemas import Notification, VnfLcmOperationOccurrenceNotification
from schemas.cluster_params import PARAM_KEY, parse_cluster_params
from subscriber.config import ClusterSettings
from subscriber.errors import ClusterParamsError, SkipStep
from subscriber.kernel import JobContext, Plan, Step

__all__ = ["TerminateCluster"]


async def _vim_name(ctx: JobContext) -> str:
    """``vim_name`` of the INSTANTIATE parameters when still readable, else Tacker's default."""
    n = ctx.notification
    default = f"kubernetes_vim_{ctx.vnf_instance_id}"
    if not isinstance(n, VnfLcmOperationOccurrenceNotification):
        return default
    occ = await ctx.services.need_tacker().get_op_occ(n.vnfLcmOpOccId)
    additional = (occ.get("operationParams") or {}).get("additionalParams") or {}
    if PARAM_KEY not in additional:
        return default
    try:
        params = parse_cluster_params(additional, api=api_version(n))
    except ClusterParamsError:
        return default
    return params.vim_name_for(ctx.vnf_instance_id)


async def _delete_vim(ctx: JobContext) -> dict[str, Any]:
    name = await _vim_name(ctx)
    if not await ctx.services.need_tacker().delete_vim(name):
        raise SkipStep(f"no VIM named {name}", {"vimName": name, "deleted": False})
    return {"vimName": name, "deleted": True}


async def _clear_write_back(ctx: JobContext) -> dict[str, Any]:
    api = api_version(ctx.notification)
    if api == "v2":
        raise SkipStep("Tacker v2 resets vimConnectionInfo at TERMINATE", {"api": api})
    await ctx.services.need_tacker().clear_write_back(ctx.vnf_instance_id, api=api)
    return {"api": api, "cleared": True}


async def _forget_inventory(ctx: JobContext) -> dict[str, Any]:
    removed = await ctx.services.need_inventory().forget(ctx.vnf_instance_id)
    if not removed:
        raise SkipStep("no inventory for this instance", {"removed": 0})
    return {"removed": removed}


class TerminateCluster:
    """``TERMINATE / COMPLETED``."""

    name = "cluster-terminate"

    def __init__(self, settings: ClusterSettings | None = None) -> None:
        self.settings = settings or ClusterSettings()

    def plan(self, notification: Notification) -> Plan:
        return Plan(
            (
                Step("delete-vim", _delete_vim, idempotent=True, timeout=120.0),
                Step("clear-write-back", _clear_write_back, idempotent=True, timeout=300.0),
                Step("forget-inventory", _forget_inventory, idempotent=True, timeout=30.0),
            )
        )
