"""Driving the bed's Tacker through its v1 VNF LCM API, as seed 000's user does.

The v1 bed needs, beyond the v2 one (:mod:`tests.testbed.tacker_bed`): an OpenStack VIM
registered (``POST /v1.0/vims``; v1 creates no instance without a default VIM of the
project, and an instantiate request names the VIM it runs on, as seed 000's parameter
file does), the ``kubernetes_cluster_v1`` package (BaseHOT and LCM operation user
data), and v1 requests (``Version: 1.3.0``; the instantiate request's
``extVirtualLinks`` carry only the layer protocol, as the seed's).

Synchronous, like :mod:`tests.testbed.tacker_api`: tests and the demo drive Tacker from one
thread while serve and the simulator run as processes.
"""

from __future__ import annotations

from typing import Any

from tests.testbed import tacker_bed
from tests.testbed.tacker_api import TackerClient

__all__ = ["V1Tacker", "v1_ext_virtual_links", "v1_vim_connection_info"]

PACKAGE = "kubernetes_cluster_v1"
VERSION = {"Version": "1.3.0"}


def v1_ext_virtual_links(network_id: str) -> list[dict[str, Any]]:
    """The seed's external links: masterNode_CP1 and workerNode_CP2 on one network."""

    def link(vl_id: str, cpd: str) -> dict[str, Any]:
        protocol = {"layerProtocol": "IP_OVER_ETHERNET"}
        return {
            "id": vl_id,
            "resourceId": network_id,
            "extCps": [{"cpdId": cpd, "cpConfig": [{"cpProtocolData": [protocol]}]}],
        }

    return [link("net0_master", "masterNode_CP1"), link("net0_worker", "workerNode_CP2")]


def v1_vim_connection_info(vim_id: str) -> list[dict[str, Any]]:
    """The instantiate request's ``vimConnectionInfo``: the OpenStack VIM to run on."""
    return [{"id": f"vim-{vim_id[:8]}", "vimId": vim_id, "vimType": "openstack"}]


class V1Tacker(TackerClient):
    """The v1 calls the tests need, against one bed: the v2 client's calls through
    ``/vnflcm/v1`` with v1's ``Version``, and v1.0's VIMs."""

    lcm = "/vnflcm/v1"
    version = VERSION

    # -- VIMs ---------------------------------------------------------------------------

    def vims(self) -> list[dict[str, Any]]:
        return list(self._ok(200, "GET", "/v1.0/vims")[1].get("vims", []))

    def register_openstack_vim(
        self, state: tacker_bed.BedState, auth_url: str, login: dict[str, str], name: str
    ) -> str:
        """Register the cloud at ``auth_url`` (the project's default VIM if it has none)."""
        default = not any(v.get("is_default") for v in self.vims())
        return tacker_bed.register_openstack_vim(state, auth_url, login, name=name, default=default)
