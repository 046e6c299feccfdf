"""Tacker's management-driver hooks: what a VNF package's ``lccn_hook.py`` asks of us at
each point of a v2 operation, and which transition's job answers it.

Tacker 16 runs the script of ``interfaces.Vnflcm.<point>`` inside the operation and
waits for it (``conductor/vnflcm_driver_v2.py``): a ``*_start`` before its own work on
the VMs, a ``*_end`` after it, a ``*_rollback_start`` before a rollback deletes what the
operation made. The script asks us to run the job of one transition of the op-occ
and waits for its outcome:

=============================  ================  ==========================================
point                          transition        what its job does
=============================  ================  ==========================================
``instantiate_end``            COMPLETED         build the cluster; the k8s vimConnectionInfo
                                                 entry goes back in the script's answer
``scale_start``, ``heal_start``  PROCESSING      drain the nodes on the servers Tacker removes
``scale_end``, ``heal_end``    COMPLETED         converge the cluster on the VNFCs
``terminate_start``            COMPLETED         forget the cluster (VIM, inventory)
``instantiate_rollback_start``  ROLLING_BACK     reset the nodes, forget the cluster
``scale_rollback_start``       ROLLING_BACK      the nodes the SCALE_OUT added leave again
=============================  ================  ==========================================

The job is the one the routing table gives that (operation, transition): a hook only
moves its trigger earlier, into the operation. Its request is kept under
:func:`hook_key` before any event exists, so the job always finds it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.enums import LcmOperationStateType, LcmOperationType
from schemas.ids import ResourceId

__all__ = [
    "DRAIN_POINTS",
    "HOOK_POINTS",
    "HookPoint",
    "HookRequest",
    "answer_key",
    "hook_key",
]

HookPoint = Literal[
    "instantiate_end",
    "scale_start",
    "scale_end",
    "heal_start",
    "heal_end",
    "terminate_start",
    "instantiate_rollback_start",
    "scale_rollback_start",
]

# point -> (operation, the transition whose job answers it)
HOOK_POINTS: dict[str, tuple[LcmOperationType, LcmOperationStateType]] = {
    "instantiate_end": (LcmOperationType.INSTANTIATE, LcmOperationStateType.COMPLETED),
    "scale_start": (LcmOperationType.SCALE, LcmOperationStateType.PROCESSING),
    "scale_end": (LcmOperationType.SCALE, LcmOperationStateType.COMPLETED),
    "heal_start": (LcmOperationType.HEAL, LcmOperationStateType.PROCESSING),
    "heal_end": (LcmOperationType.HEAL, LcmOperationStateType.COMPLETED),
    "terminate_start": (LcmOperationType.TERMINATE, LcmOperationStateType.COMPLETED),
    "instantiate_rollback_start": (
        LcmOperationType.INSTANTIATE,
        LcmOperationStateType.ROLLING_BACK,
    ),
    "scale_rollback_start": (LcmOperationType.SCALE, LcmOperationStateType.ROLLING_BACK),
}
# The points whose job drains the servers of the request.
DRAIN_POINTS = frozenset({"scale_start", "heal_start"})


class HookRequest(BaseModel):
    """``POST /lccn/hooks``: run the op-occ's job for this point, and say how it went.

    ``servers`` (drain points only) are the Nova server ids (``computeResource.resourceId``)
    of the COMPUTE resources in Tacker's grant request ``removeResources``: Tacker's own
    choice of what it removes, so we never guess it. ``vnfInstance`` is the instance as
    Tacker holds it in the operation (its database is written only at the end): its
    ``instantiatedVnfInfo`` and, without their ``accessInfo``, its ``vimConnectionInfo``.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    point: HookPoint
    vnfInstanceId: ResourceId
    vnfLcmOpOccId: ResourceId
    servers: Annotated[list[ResourceId], Field(max_length=1000)] = []
    vnfInstance: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _servers_for_a_drain(self) -> HookRequest:
        if self.drains and not self.servers:
            raise ValueError(f"{self.point} drains the servers Tacker removes: name one at least")
        if self.servers and not self.drains:
            raise ValueError(f"{self.point} drains nothing: servers are for the *_start points")
        if self.point.endswith("_end") and not self.vnfInstance:
            # Tacker's database has the operation's VNFCs only once it is over.
            raise ValueError(f"{self.point} needs the vnfInstance Tacker handed the script")
        return self

    @property
    def operation(self) -> LcmOperationType:
        return HOOK_POINTS[self.point][0]

    @property
    def state(self) -> LcmOperationStateType:
        """The transition whose job answers this point."""
        return HOOK_POINTS[self.point][1]

    @property
    def drains(self) -> bool:
        return self.point in DRAIN_POINTS


def hook_key(op_occ_id: str, state: str) -> str:
    """The store key of the hook request that the op-occ's ``state`` job answers."""
    return f"hook:{op_occ_id}:{state}"


def answer_key(op_occ_id: str) -> str:
    """The store key of what a job hands back to the op-occ's hook (sealed)."""
    return f"hook-answer:{op_occ_id}"
