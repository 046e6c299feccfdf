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

import time
from typing import Any

from tests.testbed import tacker_bed
from tests.testbed.tacker_api import TERMINAL_STATES, wait_for

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


class V1Tacker:
    """The v1 calls the tests need, against one bed."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], Any]:
        return tacker_bed.request(method, f"{self.url}{path}", body, headers=VERSION)

    def _ok(self, expected: int, method: str, path: str, body: Any = None) -> Any:
        status, headers, answer = self.call(method, path, body)
        assert status == expected, f"{method} {path}: {status} {answer}"
        return headers, answer

    # -- VIMs ---------------------------------------------------------------------------

    def vims(self) -> list[dict[str, Any]]:
        return list(self._ok(200, "GET", "/v1.0/vims")[1].get("vims", []))

    def register_openstack_vim(
        self, state: tacker_bed.BedState, auth_url: str, login: dict[str, str], name: str
    ) -> str:
        """Register the cloud at ``auth_url`` (the project's default VIM if it has none)."""
        default = not any(v.get("is_default") for v in self.vims())
        return tacker_bed.register_openstack_vim(state, auth_url, login, name=name, default=default)

    # -- instances and op-occs ----------------------------------------------------------

    def create(self, vnfd_id: str, name: str) -> str:
        body = {"vnfdId": vnfd_id, "vnfInstanceName": name}
        return str(self._ok(201, "POST", "/vnflcm/v1/vnf_instances", body)[1]["id"])

    def show(self, inst_id: str) -> dict[str, Any]:
        return self._ok(200, "GET", f"/vnflcm/v1/vnf_instances/{inst_id}")[1]  # type: ignore[no-any-return]

    def op_occ(self, occ_id: str) -> dict[str, Any]:
        return self._ok(200, "GET", f"/vnflcm/v1/vnf_lcm_op_occs/{occ_id}")[1]  # type: ignore[no-any-return]

    def start_op(self, inst_id: str, task: str, body: dict[str, Any]) -> str:
        """POST an LCM task; the op-occ id. A 409 right after another op-occ (Tacker still
        holds the instance) is retried briefly, as an operator's client would."""
        path = f"/vnflcm/v1/vnf_instances/{inst_id}/{task}"
        deadline = time.monotonic() + 10.0
        while True:
            status, headers, answer = self.call("POST", path, body)
            if status == 409 and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            assert status == 202, f"POST {path}: {status} {answer}"
            return str(headers["Location"].rsplit("/", 1)[1])

    def wait_op(self, occ_id: str, timeout: float = 90.0) -> dict[str, Any]:
        return wait_for(  # type: ignore[no-any-return]
            lambda: (o := self.op_occ(occ_id))["operationState"] in TERMINAL_STATES and o,
            timeout=timeout,
            interval=0.2,
            what=f"v1 op-occ {occ_id} to finish",
        )

    def run_op(self, inst_id: str, task: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.wait_op(self.start_op(inst_id, task, body))

    def delete(self, inst_id: str, timeout: float = 30.0) -> None:
        def attempt() -> bool:
            status, _, answer = self.call("DELETE", f"/vnflcm/v1/vnf_instances/{inst_id}")
            assert status in (204, 409), f"DELETE {inst_id}: {status} {answer}"
            return status == 204

        wait_for(attempt, timeout=timeout, interval=0.2, what=f"DELETE {inst_id}")

    # -- subscriptions ------------------------------------------------------------------

    def subscriptions(self) -> list[dict[str, Any]]:
        return list(self._ok(200, "GET", "/vnflcm/v1/subscriptions")[1] or [])

    def subscribe(self, callback_uri: str) -> str:
        return str(
            self._ok(201, "POST", "/vnflcm/v1/subscriptions", {"callbackUri": callback_uri})[1][
                "id"
            ]
        )

    def unsubscribe(self, sub_id: str) -> None:
        self.call("DELETE", f"/vnflcm/v1/subscriptions/{sub_id}")
