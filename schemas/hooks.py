"""The drain hook's request: what a VNF package's ``scale_start`` / ``heal_start`` script
asks of us before Tacker deletes VMs (see ``scripts/vnf_package/.../lccn_hook.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.ids import ResourceId

__all__ = ["DrainRequest", "drain_key"]


class DrainRequest(BaseModel):
    """``POST /lccn/hooks/drain``: drain the nodes on these servers, Tacker removes them next.

    ``servers`` are the Nova server ids (``computeResource.resourceId``) of the COMPUTE
    resources in Tacker's grant request ``removeResources``: Tacker's own choice of what
    it removes, so we never guess it.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    vnfInstanceId: ResourceId
    vnfLcmOpOccId: ResourceId
    operation: Literal["SCALE", "HEAL"]
    servers: Annotated[list[ResourceId], Field(min_length=1, max_length=1000)]


def drain_key(op_occ_id: str) -> str:
    """The store key under which the op-occ's drain request is kept."""
    return f"drain:{op_occ_id}"
