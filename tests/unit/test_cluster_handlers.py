"""Cluster handlers with in-memory Tacker/OpenStack: parameters, discovery, plans."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from handlers import HandlerRegistry, JobContext, default_registry
from handlers.cluster import load_params
from handlers.discovery import DiscoveryError, discover
from handlers.instantiate import InstantiateCluster, ValidateInstantiate
from handlers.ports import PortAddresses
from handlers.terminate import TerminateCluster
from schemas import parse_notification_data
from schemas.cluster_params import parse_cluster_params
from subscriber.errors import PermanentStepError
from tests.cluster_fakes import (
    MASTER_CP,
    FakeOpenStack,
    FakeTacker,
    cluster_vnf,
    k8s_params,
    uid,
)
from tests.factories import op_occ

pytestmark = pytest.mark.asyncio


def ctx_for(
    instance: str,
    occ: str,
    services: dict[str, Any],
    *,
    operation: str = "INSTANTIATE",
    state: str = "COMPLETED",
    version: int = 2,
) -> JobContext:
    body = op_occ(
        instance=instance, op_occ_id=occ, operation=operation, state=state, version=version
    )
    return JobContext(
        event_id=1,
        job_id=1,
        attempt=1,
        mode="live",
        notification=parse_notification_data(body),
        results={},
        services=services,
        log=logging.LoggerAdapter(logging.getLogger("test"), {}),
    )


# ----------------------------------------------------------------- parameters


async def test_params_come_from_the_operation() -> None:
    tacker, _, inst, occ = cluster_vnf(["10.9.0.5"], ["10.9.0.6"])
    params = await load_params(ctx_for(inst, occ, {"tacker": tacker}), tacker, "v2")
    assert params.master_node.vdu_id == "masterNode"
    assert params.pod_cidr == "10.200.0.0/16"


async def test_params_fall_back_to_the_instance_and_take_overrides() -> None:
    tacker, _, inst, occ = cluster_vnf(["10.9.0.5"], ["10.9.0.6"])
    saved = k8s_params(master_user="ubuntu", worker_user="ubuntu", password="old-pw")
    tacker.instances[inst]["instantiatedVnfInfo"]["additionalParams"] = saved
    tacker.op_occs[occ]["operationParams"] = {
        "additionalParams": {"worker_node_password": "new-pw-123"}
    }
    params = await load_params(ctx_for(inst, occ, {}, operation="SCALE"), tacker, "v1")
    assert params.master_node.password is not None
    assert params.master_node.password.get_secret_value() == "old-pw"
    assert params.worker_node.password is not None
    assert params.worker_node.password.get_secret_value() == "new-pw-123"


async def test_missing_or_invalid_params_fail_permanently_without_values() -> None:
    tacker, _, inst, occ = cluster_vnf(["10.9.0.5"], [])
    tacker.op_occs[occ]["operationParams"] = {}
    with pytest.raises(PermanentStepError, match="k8s_cluster_installation_param"):
        await load_params(ctx_for(inst, occ, {}), tacker, "v2")

    bad = k8s_params(master_user="ubuntu", password="Sup3r-Secret-pw")
    del bad["k8s_cluster_installation_param"]["master_node"]["vdu_id"]
    tacker.op_occs[occ]["operationParams"] = {"additionalParams": bad}
    with pytest.raises(PermanentStepError) as info:
        await load_params(ctx_for(inst, occ, {}), tacker, "v2")
    assert "vdu_id" in str(info.value) and "Sup3r-Secret-pw" not in str(info.value)


async def test_starting_handler_validates_early() -> None:
    tacker, _, inst, occ = cluster_vnf(["10.9.0.5"], [])
    bad = k8s_params()
    bad["k8s_cluster_installation_param"]["master_node"]["pod_cidr"] = "not-a-cidr"
    tacker.op_occs[occ]["operationParams"] = {"additionalParams": bad}
    ctx = ctx_for(inst, occ, {"tacker": tacker}, state="STARTING")
    (step,) = await ValidateInstantiate().plan(ctx)
    with pytest.raises(PermanentStepError, match="pod_cidr"):
        await step.run(ctx)


# ------------------------------------------------------------------- discovery


async def test_discovery_simple() -> None:
    tacker, openstack, inst, _occ = cluster_vnf(["10.9.0.15"], ["10.9.0.17", "10.9.0.16"])
    params = parse_cluster_params(k8s_params())
    topo = await discover(tacker.instances[inst], params, openstack)
    assert [n.name for n in topo.masters] == ["master15"]
    assert [n.name for n in topo.workers] == ["worker16", "worker17"]  # by address
    assert topo.cluster_ip == "10.9.0.15" and not topo.ha
    assert topo.endpoint == "https://10.9.0.15:6443"
    vnfcs = {v["id"]: v for v in tacker.instances[inst]["instantiatedVnfInfo"]["vnfcResourceInfo"]}
    for node in topo.nodes:
        vnfc = vnfcs[node.vnfc_id]
        assert node.stack_id == vnfc["metadata"]["stack_id"]
        assert node.server_id == vnfc["computeResource"]["resourceId"]
        assert node.compute_host == openstack.hosts[node.server_id]
        assert node.ssh_ip == node.nic_ip and node.cluster_ip == "10.9.0.15"


async def test_discovery_ha_vip_from_the_top_stack_and_floating_ssh() -> None:
    masters = ["10.9.0.23", "10.9.0.21", "10.9.0.22"]
    tacker, openstack, inst, _occ = cluster_vnf(
        masters, ["10.9.0.31"], vip="10.9.0.200", floating={"10.9.0.21": "192.0.2.7"}
    )
    params = parse_cluster_params(k8s_params(ha=True))
    topo = await discover(tacker.instances[inst], params, openstack)
    assert [n.name for n in topo.masters] == ["master21", "master22", "master23"]
    assert topo.main.ssh_ip == "192.0.2.7" and topo.main.nic_ip == "10.9.0.21"
    assert topo.ha and topo.cluster_ip == "10.9.0.200"
    assert topo.endpoint == "https://10.9.0.200:16443"
    top = tacker.instances[inst]["instantiatedVnfInfo"]["metadata"]["stack_id"]
    assert (f"vnf-{inst}/{top}", "vip_CP") in openstack.calls


async def test_discovery_cluster_fip_is_the_endpoint() -> None:
    tacker, openstack, inst, _ = cluster_vnf(["10.9.0.15"], [])
    (vnfc,) = tacker.instances[inst]["instantiatedVnfInfo"]["vnfcResourceInfo"]
    openstack.ports[(vnfc["metadata"]["stack_id"], "fip_CP")] = PortAddresses((), "192.0.2.9")
    params = parse_cluster_params(k8s_params(cluster_fip_name="fip_CP"))
    topo = await discover(tacker.instances[inst], params, openstack)
    assert topo.endpoint == "https://192.0.2.9:6443"


async def test_discovery_refuses_what_is_not_a_cluster() -> None:
    tacker, openstack, inst, _ = cluster_vnf(["10.9.0.15"], ["10.8.0.15"])
    params = parse_cluster_params(k8s_params())
    with pytest.raises(DiscoveryError, match="same node"):
        # master15 and worker15 are fine; two workers ending in .15 are not
        info = tacker.instances[inst]["instantiatedVnfInfo"]
        info["vnfcResourceInfo"].append({**info["vnfcResourceInfo"][1], "id": uid()})
        await discover(tacker.instances[inst], params, openstack)
    empty = {"id": inst, "instantiatedVnfInfo": {"vnfcResourceInfo": []}}
    with pytest.raises(DiscoveryError, match="no vnfcResourceInfo"):
        await discover(empty, params, FakeOpenStack())


# ------------------------------------------------------------------------ plans


def services(tacker: FakeTacker, openstack: FakeOpenStack) -> dict[str, Any]:
    return {"tacker": tacker, "openstack": openstack, "ssh": object(), "inventory": object()}


async def test_plan_simple() -> None:
    tacker, openstack, inst, occ = cluster_vnf(["10.9.0.15"], ["10.9.0.16", "10.9.0.17"])
    plan = await InstantiateCluster().plan(ctx_for(inst, occ, services(tacker, openstack)))
    assert [s.name for s in plan] == [
        "discover",
        "upload-scripts",
        "configure-hosts",
        "init-master-master15",
        "join-workers",
        "admin-token",
        "cluster-access",
        "register-vim",
        "write-back",
    ]
    assert all(s.idempotent for s in plan)


async def test_plan_ha_joins_masters_one_by_one() -> None:
    tacker, openstack, inst, occ = cluster_vnf(
        ["10.9.0.21", "10.9.0.22", "10.9.0.23"], ["10.9.0.31", "10.9.0.32"], vip="10.9.0.200"
    )
    tacker.op_occs[occ]["operationParams"]["additionalParams"] = k8s_params(ha=True)
    plan = await InstantiateCluster().plan(ctx_for(inst, occ, services(tacker, openstack)))
    names = [s.name for s in plan]
    assert names[3:6] == ["init-master-master21", "join-master-master22", "join-master-master23"]
    assert names[6] == "join-workers"
    assert all(s.idempotent for s in plan)


async def test_plan_needs_its_services() -> None:
    _tacker, _openstack, inst, occ = cluster_vnf(["10.9.0.15"], [])
    with pytest.raises(PermanentStepError, match="'tacker' service is not configured"):
        await InstantiateCluster().plan(ctx_for(inst, occ, {}))


async def test_terminate_v2_sends_no_patch_and_forgets() -> None:
    tacker, _, inst, occ = cluster_vnf(["10.9.0.15"], [])
    tacker.op_occs[occ]["operationParams"] = {"terminationType": "FORCEFUL"}
    tacker.vims[f"kubernetes_vim_{inst}"] = "vim-1"

    class Inventory:
        forgotten: list[str] = []

        async def forget(self, vnf_instance_id: str) -> int:
            self.forgotten.append(vnf_instance_id)
            return 3

    inventory = Inventory()
    for version, cleared in ((2, []), (1, [(inst, "v1")])):
        tacker.cleared.clear()
        ctx = ctx_for(
            inst,
            occ,
            {"tacker": tacker, "inventory": inventory},
            operation="TERMINATE",
            version=version,
        )
        plan = await TerminateCluster().plan(ctx)
        assert [s.name for s in plan] == ["delete-vim", "clear-write-back", "forget-inventory"]
        for step in plan:
            try:
                await step.run(ctx)
            except Exception as exc:  # SkipStep
                assert type(exc).__name__ == "SkipStep", exc
        assert tacker.cleared == cleared
    assert tacker.deleted_vims == [f"kubernetes_vim_{inst}"]
    assert inventory.forgotten == [inst, inst]
    assert tacker.write_backs == []


async def test_registry_routes() -> None:
    registry = default_registry(cluster_handlers=True)
    routes = {(op, st): name for op, st, name in registry.routes()}
    assert routes[("INSTANTIATE", "COMPLETED")] == "cluster-instantiate"
    assert routes[("INSTANTIATE", "STARTING")] == "cluster-instantiate-validate"
    assert routes[("TERMINATE", "COMPLETED")] == "cluster-terminate"
    assert routes[(None, None)] == "log"
    plain = default_registry()
    assert ("INSTANTIATE", "COMPLETED") not in {(o, s) for o, s, _ in plain.routes()}
    assert isinstance(plain, HandlerRegistry)
    assert MASTER_CP == "masterNode_CP1"
