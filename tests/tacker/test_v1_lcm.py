"""The v1 API of seeds 000 and 001 on the real Tacker 16.0.0 and the simulated OpenStack.

Tacker drives the seed's package format (BaseHOT, one AutoScalingGroup per scaling
aspect, LCM operation user data) through INSTANTIATE, SCALE by ``aspectId`` (a
ScalingPolicy signal), HEAL of a VNFC and of the whole VNF, and TERMINATE, on an
OpenStack VIM registered as seed 000 does. ``serve`` subscribes itself through v1
(its generated BASIC credentials): every v1 notification, posted with no Content-Type
and no Version, is stored. And the cluster handlers' v1 discovery, run on what the
real Tacker shows (no ``metadata.stack_id``) and the simulated Heat, finds each node
where the simulator put it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from handlers.toolkit.topology import discover
from schemas.cluster_params import parse_cluster_params
from schemas.lcm import saved_params
from subscriber.config import OpenStackSettings
from subscriber.openstack import OpenStackClient
from tests.testbed import tacker_bed as tb
from tests.testbed.cluster_vnf import v1_params
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import NETWORK_ID, unique_name, wait_for
from tests.testbed.tacker_serve import ServeProcess
from tests.testbed.tacker_v1 import V1Tacker, v1_ext_virtual_links, v1_vim_connection_info

pytestmark = [pytest.mark.tacker, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def v1(bed: tb.BedState) -> V1Tacker:
    return V1Tacker(bed.url)


@pytest.fixture(scope="module")
def sim_vim(bed: tb.BedState, v1: V1Tacker, sim: SimProcess) -> str:
    """This tier's simulated cloud, registered as an OpenStack VIM (seed 000's `openstack
    vim list`): a v1 instance is made only with a default VIM, and runs on the VIM its
    instantiate request names."""
    return v1.register_openstack_vim(
        bed, sim.auth_url, sim.openstack_settings(), f"tacker-tier-{uuid.uuid4().hex[:8]}"
    )


@pytest.fixture
def v1_serve(bed: tb.BedState, v1: V1Tacker, tmp_path: Path) -> Iterator[ServeProcess]:
    """serve speaking v1: it subscribes itself through ``/vnflcm/v1`` with generated BASIC
    credentials; no cluster handlers (events are stored and logged)."""
    proc = ServeProcess(
        tmp_path,
        config={
            "tacker": bed.tacker_section(api_version="v1", subscribe_on_start=True),
            "cluster": {"handlers": "off"},
        },
    )
    proc.start()
    try:
        v1.wait_subscribed(proc.callback_url)
        yield proc
    finally:
        proc.stop()
        v1.unsubscribe_all(proc.callback_url)


def stored(serve: ServeProcess, occ_id: str) -> list[tuple[Any, ...]]:
    return serve.rows(
        "SELECT operation_state, notification_status, source, api_version FROM events"
        " WHERE vnf_lcm_op_occ_id = ? ORDER BY id",
        occ_id,
    )


def settled(serve: ServeProcess, occ: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The op-occ's notifications in serve's store, once its final one is there."""
    final = occ["operationState"]
    return wait_for(  # type: ignore[no-any-return]
        lambda: (rows := stored(serve, occ["id"])) and rows[-1][0] == final and rows,
        timeout=30,
        interval=0.1,
        what=f"serve to store {occ['operation']} {final}",
    )


async def test_v1_lcm_reaches_serve_and_v1_discovery_finds_the_nodes(
    bed: tb.BedState,
    v1: V1Tacker,
    v1_vnfd: str,
    sim: SimProcess,
    sim_vim: str,
    v1_serve: ServeProcess,
) -> None:
    # Tacker adds the entry of the VIM that was the project's default when the instance
    # was made (vnflcm/utils.py), which may be another test's, after the request's own.
    default_vim = next(v["id"] for v in v1.vims() if v.get("is_default"))
    inst = v1.create(v1_vnfd, unique_name("v1-lcm"))
    instantiated = False
    try:
        occ = v1.run_op(
            inst,
            "instantiate",
            {
                "flavourId": "simple",
                "vimConnectionInfo": v1_vim_connection_info(sim_vim),
                "extVirtualLinks": v1_ext_virtual_links(NETWORK_ID),
                "additionalParams": v1_params(),
            },
        )
        instantiated = occ["operationState"] == "COMPLETED"
        assert instantiated, occ.get("error")
        # v1 START for STARTING and PROCESSING; no Version header, so none stored.
        assert settled(v1_serve, occ) == [
            ("STARTING", "START", "http", None),
            ("PROCESSING", "START", "http", None),
            ("COMPLETED", "RESULT", "http", None),
        ]

        shown = v1.show(inst)
        info = shown["instantiatedVnfInfo"]
        assert {s["aspectId"]: s["scaleLevel"] for s in info["scaleStatus"]} == {
            "master_instance": 0,
            "worker_instance": 0,
        }
        assert not any("metadata" in v for v in info["vnfcResourceInfo"])
        assert saved_params(shown) == occ["operationParams"]["additionalParams"]
        # The list names the VIM the request gave, then the default VIM's entry.
        vci = shown["vimConnectionInfo"]
        assert (vci[0]["vimId"], vci[0]["vimType"]) == (sim_vim, "openstack")
        assert {(e["vimId"], e["vimType"]) for e in vci} == {
            (sim_vim, "openstack"),
            (default_vim, "openstack"),
        }

        # The handlers' v1 discovery on what Tacker shows: each VNFC's server is found in
        # its AutoScalingGroup member under vnflcm_<id>, its port's address is the node's.
        state = sim.control.state()
        address = {
            port["device_id"]: port["fixed_ips"][0]["ip_address"]
            for port in state["ports"]
            if port.get("device_id")
        }
        params = parse_cluster_params(saved_params(shown), api="v1")
        async with OpenStackClient(OpenStackSettings(**sim.openstack_settings())) as os_client:
            topo = await discover(shown, params, os_client)
        servers = {v["computeResource"]["resourceId"]: v["vduId"] for v in info["vnfcResourceInfo"]}
        assert {n.server_id: n.nic_ip for n in topo.nodes} == {s: address[s] for s in servers}
        assert [n.server_id for n in topo.masters] == [
            s for s, vdu in servers.items() if vdu == "masterNode"
        ]
        assert all(n.stack_id and n.stack_id.startswith(f"vnflcm_{inst}-") for n in topo.nodes)

        # Day 2: SCALE by aspect (a ScalingPolicy signal), HEAL a VNFC, HEAL the VNF.
        for task, body, workers in (
            ("scale", {"type": "SCALE_OUT", "aspectId": "worker_instance", "numberOfSteps": 1}, 3),
            ("scale", {"type": "SCALE_IN", "aspectId": "worker_instance", "numberOfSteps": 1}, 2),
        ):
            occ = v1.run_op(inst, task, body)
            assert occ["operationState"] == "COMPLETED", occ.get("error")
            assert [r[0] for r in settled(v1_serve, occ)][-1] == "COMPLETED"
            vnfcs = v1.show(inst)["instantiatedVnfInfo"]["vnfcResourceInfo"]
            assert sum(v["vduId"] == "workerNode" for v in vnfcs) == workers
        worker = next(v for v in vnfcs if v["vduId"] == "workerNode")
        occ = v1.run_op(inst, "heal", {"vnfcInstanceId": [worker["id"]]})
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        healed = next(
            v
            for v in v1.show(inst)["instantiatedVnfInfo"]["vnfcResourceInfo"]
            if v["id"] == worker["id"]
        )  # v1 keeps the VNFC's id and shows its new server
        assert healed["computeResource"]["resourceId"] != worker["computeResource"]["resourceId"]
        occ = v1.run_op(inst, "heal", {})
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        assert [r[0] for r in settled(v1_serve, occ)][-1] == "COMPLETED"

        occ = v1.run_op(inst, "terminate", {"terminationType": "FORCEFUL"})
        instantiated = False
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        assert [r[0] for r in settled(v1_serve, occ)][-1] == "COMPLETED"
        assert v1.show(inst)["instantiationState"] == "NOT_INSTANTIATED"
        # Terminated: the stack is gone (Tacker waited for DELETE_COMPLETE by its id).
        assert not [s for s in sim.control.state()["stacks"] if f"vnflcm_{inst}" in s["name"]]
    finally:
        if instantiated:
            v1.run_op(inst, "terminate", {"terminationType": "FORCEFUL"})
        v1.delete(inst)
