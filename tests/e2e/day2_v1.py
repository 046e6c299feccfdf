"""The day-2 loop (:class:`~tests.e2e.day2.Loop`) driven through Tacker's v1 API, as seed
000 drives it: the v1 package (BaseHOT, aspects ``master_instance`` and
``worker_instance``, LCM operation user data), the parameters of seed 000's tables
(``aspect_id``, no ``vdu_id``), an instantiate request naming the OpenStack VIM it runs
on, SCALE by ``aspectId``, HEAL by ``vnfcInstanceId`` (the ``vnfcResourceInfo`` id: v1
keeps it through the heal and shows the new server). What Tacker changed is read from
the op-occ's ``resourceChanges`` (serve holds the only v1 subscription).
"""

from __future__ import annotations

from typing import Any

from tests.testbed.cluster_vnf import v1_params
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import NETWORK_ID
from tests.testbed.tacker_serve import ServeProcess
from tests.testbed.tacker_v1 import V1Tacker, v1_ext_virtual_links, v1_vim_connection_info

from .day2 import Loop

__all__ = ["WORKER_ASPECT", "V1Loop"]

WORKER_ASPECT = "worker_instance"


class V1Loop(Loop):
    """One v1 VNF instance of the v1 package, its ``serve`` and the test hosts."""

    def __init__(
        self, tacker: V1Tacker, sim: SimProcess, hosts: Any, serve: ServeProcess, vim_id: str
    ) -> None:
        super().__init__(tacker, sim, hosts, serve, recorder=None)  # type: ignore[arg-type]
        self.v1 = tacker
        self.vim_id = vim_id

    prefix = "v1"

    def params(self, **values: Any) -> dict[str, Any]:
        return v1_params(**values)

    def placement(self) -> dict[str, Any]:
        return {
            "vimConnectionInfo": v1_vim_connection_info(self.vim_id),
            "extVirtualLinks": v1_ext_virtual_links(NETWORK_ID),
        }

    def scale(self, kind: str, steps: int = 1) -> dict[str, Any]:
        return self.op("scale", {"type": kind, "aspectId": WORKER_ASPECT, "numberOfSteps": steps})

    def heal_vnfc(self, vnfc_id: str) -> dict[str, Any]:
        return self.op("heal", {"vnfcInstanceId": [vnfc_id]})

    def affected(self, occ_id: str, change: str) -> list[str]:
        changes = self.v1.op_occ(occ_id).get("resourceChanges") or {}
        return [
            a["id"] for a in changes.get("affectedVnfcs") or () if a.get("changeType") == change
        ]
