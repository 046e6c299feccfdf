"""Cluster handlers with in-memory Tacker/OpenStack: parameters, discovery, plans."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from handlers import default_routing
from handlers.instantiate import InstantiateCluster, ValidateInstantiate
from handlers.terminate import TerminateCluster
from handlers.toolkit import kubeadm
from handlers.toolkit.params import load_params
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import Topology, discover
from schemas.cluster_params import parse_cluster_params
from subscriber.config import ClusterSettings
from subscriber.errors import (
    DiscoveryError,
    EndJob,
    NotACluster,
    PermanentStepError,
    ServiceMissing,
    SkipStep,
)
from subscriber.kernel import JobContext, RoutingTable, Services, Step, StepsFor
from subscriber.kernel.ports import PortAddresses
from tests.cluster_fakes import (
    INSTANTIATE_HEAD,
    INSTANTIATE_TAIL,
    MASTER_CP,
    FakeOpenStack,
    FakeSsh,
    FakeTacker,
    cluster_vnf,
    job_context,
    k8s_params,
    lcm_notification,
    lcm_op_occ,
    run_step,
    uid,
)
from tests.factories import op_occ

pytestmark = pytest.mark.asyncio


def ctx_for(
    instance: str,
    occ: str,
    services: Services,
    *,
    operation: str = "INSTANTIATE",
    state: str = "COMPLETED",
    version: int = 2,
) -> JobContext:
    body = op_occ(
        instance=instance, op_occ_id=occ, operation=operation, state=state, version=version
    )
    return job_context(body, services)


# ----------------------------------------------------------------- parameters


async def test_params_come_from_the_operation() -> None:
    tacker, _, inst, occ = cluster_vnf(["10.9.0.5"], ["10.9.0.6"])
    params = await load_params(tacker, lcm_notification(ctx_for(inst, occ, Services())))
    assert params.master_node.vdu_id == "masterNode"
    assert params.pod_cidr == "10.200.0.0/16"


async def test_params_fall_back_to_the_instance_and_take_overrides() -> None:
    tacker, _, inst, occ = cluster_vnf(["10.9.0.5"], ["10.9.0.6"])
    saved = k8s_params(master_user="ubuntu", worker_user="ubuntu", password="old-pw")
    tacker.instances[inst]["instantiatedVnfInfo"]["additionalParams"] = saved
    tacker.op_occs[occ]["operationParams"] = {
        "additionalParams": {"worker_node_password": "new-pw-123"}
    }
    ctx = ctx_for(inst, occ, Services(), operation="SCALE", version=1)
    params = await load_params(tacker, lcm_notification(ctx))
    assert params.master_node.password is not None
    assert params.master_node.password.get_secret_value() == "old-pw"
    assert params.worker_node.password is not None
    assert params.worker_node.password.get_secret_value() == "new-pw-123"


async def test_missing_or_invalid_params_fail_permanently_without_values() -> None:
    tacker, _, inst, occ = cluster_vnf(["10.9.0.5"], [])
    tacker.op_occs[occ]["operationParams"] = {}
    with pytest.raises(PermanentStepError, match="k8s_cluster_installation_param"):
        await load_params(tacker, lcm_notification(ctx_for(inst, occ, Services())))

    bad = k8s_params(master_user="ubuntu", password="Sup3r-Secret-pw")
    del bad["k8s_cluster_installation_param"]["master_node"]["vdu_id"]
    tacker.op_occs[occ]["operationParams"] = {"additionalParams": bad}
    with pytest.raises(PermanentStepError) as info:
        await load_params(tacker, lcm_notification(ctx_for(inst, occ, Services())))
    assert "vdu_id" in str(info.value) and "Sup3r-Secret-pw" not in str(info.value)


async def test_starting_handler_validates_early() -> None:
    tacker, _, inst, occ = cluster_vnf(["10.9.0.5"], [])
    bad = k8s_params()
    bad["k8s_cluster_installation_param"]["master_node"]["pod_cidr"] = "not-a-cidr"
    tacker.op_occs[occ]["operationParams"] = {"additionalParams": bad}
    tacker.op_occs[occ]["operationState"] = "STARTING"
    ctx = ctx_for(inst, occ, Services(tacker=tacker), state="STARTING")
    confirm, step = ValidateInstantiate().plan(ctx.notification).items
    assert isinstance(step, Step) and step.name == "validate-params"
    assert isinstance(confirm, Step) and confirm.name == "confirm"
    with pytest.raises(PermanentStepError, match="pod_cidr"):
        await run_step(step, ctx)


K8S_VIM = {
    "vimId": "c0ffee00-0000-4000-8000-000000000001",
    "vimType": "ETSINFV.KUBERNETES.V_1",
    "interfaceInfo": {"endpoint": "https://10.9.0.15:6443"},
    "accessInfo": {"bearer_token": "t0ken-value"},
}
OPENSTACK_VIM = {
    "vimId": "c0ffee00-0000-4000-8000-000000000002",
    "vimType": "ETSINFV.OPENSTACK_KEYSTONE.V_3",
}


async def test_a_cnf_without_params_is_not_a_cluster_but_a_vm_vnf_without_them_fails() -> None:
    # VNF-B of the two-VNF flow: deployed on a Kubernetes VIM, no cluster parameters.
    tacker, _, inst, occ = cluster_vnf(["10.9.0.5"], [])
    tacker.op_occs[occ]["operationParams"] = {
        "vimConnectionInfo": {"k8s": K8S_VIM},
        "additionalParams": {"lcm-kubernetes-def-files": ["Files/kubernetes/deployment.yaml"]},
    }
    with pytest.raises(NotACluster) as info:
        await load_params(
            tacker, lcm_notification(ctx_for(inst, occ, Services(), state="STARTING"))
        )
    assert info.value.result == {"notACluster": True, "vimTypes": ["ETSINFV.KUBERNETES.V_1"]}
    assert "t0ken-value" not in str(info.value)
    # Later operations: the instance's VIMs (v1 lists them) say so too.
    tacker.op_occs[occ]["operationParams"] = {}
    tacker.instances[inst]["vimConnectionInfo"] = [{**K8S_VIM, "vimType": "kubernetes"}]
    with pytest.raises(NotACluster):
        await load_params(
            tacker, lcm_notification(ctx_for(inst, occ, Services(), operation="SCALE"))
        )
    # v1 lists the project's default VIM after a CNF's own (Tacker appends the one the
    # instance was created with): the CNF runs on the first.
    tacker.instances[inst]["vimConnectionInfo"] = [
        {**K8S_VIM, "vimType": "kubernetes"},
        {**OPENSTACK_VIM, "vimType": "openstack"},
    ]
    with pytest.raises(NotACluster):
        await load_params(
            tacker, lcm_notification(ctx_for(inst, occ, Services(), operation="TERMINATE"))
        )
    # A VNF on OpenStack without parameters is a cluster VNF with a mistake: it fails
    # (v1: its Kubernetes entry, which serve appended, comes after the OpenStack one).
    tacker.instances[inst]["vimConnectionInfo"] = [
        {**OPENSTACK_VIM, "vimType": "openstack"},
        {**K8S_VIM, "vimType": "kubernetes"},
    ]
    with pytest.raises(PermanentStepError, match="k8s_cluster_installation_param"):
        await load_params(
            tacker, lcm_notification(ctx_for(inst, occ, Services(), operation="SCALE"))
        )
    tacker.instances[inst]["vimConnectionInfo"] = {"vim1": OPENSTACK_VIM, "k8s": K8S_VIM}
    with pytest.raises(PermanentStepError, match="k8s_cluster_installation_param") as failed:
        await load_params(
            tacker, lcm_notification(ctx_for(inst, occ, Services(), operation="SCALE"))
        )
    assert not isinstance(failed.value, NotACluster)


async def test_a_cnfs_job_ends_at_its_parameters_without_touching_anything() -> None:
    tacker, openstack, inst, occ = cluster_vnf(["10.9.0.15"], ["10.9.0.16"])
    tacker.op_occs[occ]["operationParams"] = {"vimConnectionInfo": {"k8s": K8S_VIM}}
    ctx = ctx_for(inst, occ, services(tacker, openstack))
    plan = InstantiateCluster().plan(ctx.notification)
    steps = plan.steps(ctx.results)  # as the runner does: results fill in as steps end
    for step in steps:
        try:
            ctx.results[step.name] = await run_step(step, ctx)
        except EndJob as ended:  # the runner ends the job here, done
            assert isinstance(ended, NotACluster) and step.name == "load-params"
            assert "is deployed on Kubernetes" in ended.reason
            break
    assert list(ctx.results) == ["confirm"]
    assert openstack.calls == [] and tacker.write_backs == []
    # The STARTING validation ends the same way, rather than failing the CNF's operation.
    check = ValidateInstantiate().plan(ctx.notification).items[-1]
    assert isinstance(check, Step)
    with pytest.raises(NotACluster):
        await run_step(check, ctx_for(inst, occ, Services(tacker=tacker), state="STARTING"))


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
    # ... so the API server's certificate must name it: the install script is told so
    # (kubeadm init's --apiserver-cert-extra-sans), after the operator's own SANs.
    override = {kubeadm.SANS_VAR: "api.example"}
    shell = NodeShell(FakeSsh(), ClusterSettings(script_env=override), params)
    assert kubeadm.script_env(shell, topo, topo.main)[kubeadm.SANS_VAR] == "api.example,192.0.2.9"
    plain = await discover(tacker.instances[inst], parse_cluster_params(k8s_params()), openstack)
    bare = NodeShell(FakeSsh(), ClusterSettings(), params)
    assert kubeadm.SANS_VAR not in kubeadm.script_env(bare, plain, plain.main)


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


def services(tacker: FakeTacker, openstack: FakeOpenStack) -> Services:
    return Services(tacker=tacker, openstack=openstack)


async def expanded(plan_items: Any, ctx: JobContext) -> list[str]:
    """The step names once discovery ran (the discover step's result in ctx.results)."""
    names = []
    for item in plan_items:
        if isinstance(item, StepsFor):
            names += [s.name for s in item.expand(item.after.from_json(ctx.results["discover"]))]
        else:
            names.append(item.name)
    return names


async def test_plan_is_pure_and_names_its_steps_before_discovery() -> None:
    tacker, openstack, inst, occ = cluster_vnf(["10.9.0.15"], ["10.9.0.16", "10.9.0.17"])
    ctx = ctx_for(inst, occ, services(tacker, openstack))
    plan = InstantiateCluster().plan(ctx.notification)
    assert tacker.gets == 0 and openstack.calls == []  # no I/O while planning
    assert plan.outline() == [
        *INSTANTIATE_HEAD,
        "init-master-<node>",
        "join-master-<node>",
        *INSTANTIATE_TAIL,
    ]
    # All but the user's Helm script (guarded by a marker on each master instead).
    assert [s.name for s in plan.items if isinstance(s, Step) and not s.idempotent] == [
        "install-helm"
    ]
    # The same plan, built again (a resumed job), names the same steps in the same order.
    assert InstantiateCluster().plan(ctx.notification).outline() == plan.outline()


async def test_plan_simple_expands_from_the_discovered_nodes() -> None:
    tacker, openstack, inst, occ = cluster_vnf(["10.9.0.15"], ["10.9.0.16", "10.9.0.17"])
    ctx = ctx_for(inst, occ, services(tacker, openstack))
    params = parse_cluster_params(k8s_params())
    ctx.results["discover"] = (await discover(tacker.instances[inst], params, openstack)).as_json()
    names = await expanded(InstantiateCluster().plan(ctx.notification).items, ctx)
    assert names == [*INSTANTIATE_HEAD, "init-master-master15", *INSTANTIATE_TAIL]


async def test_plan_ha_joins_masters_one_by_one() -> None:
    tacker, openstack, inst, occ = cluster_vnf(
        ["10.9.0.21", "10.9.0.22", "10.9.0.23"], ["10.9.0.31", "10.9.0.32"], vip="10.9.0.200"
    )
    ctx = ctx_for(inst, occ, services(tacker, openstack))
    params = parse_cluster_params(k8s_params(ha=True))
    topo = await discover(tacker.instances[inst], params, openstack)
    assert Topology.from_json(topo.as_json()) == topo  # a checkpoint gives the same topology
    ctx.results["discover"] = topo.as_json()
    names = await expanded(InstantiateCluster().plan(ctx.notification).items, ctx)
    masters = ["init-master-master21", "join-master-master22", "join-master-master23"]
    assert names == [*INSTANTIATE_HEAD, *masters, *INSTANTIATE_TAIL]


async def test_steps_need_their_services() -> None:
    _tacker, _openstack, inst, occ = cluster_vnf(["10.9.0.15"], [])
    ctx = ctx_for(inst, occ, Services())
    first = InstantiateCluster().plan(ctx.notification).items[0]
    assert isinstance(first, Step)
    with pytest.raises(ServiceMissing, match="'tacker' service is not configured"):
        await run_step(first, ctx)


async def test_terminate_v2_sends_no_patch_and_forgets() -> None:
    params = k8s_params()
    params["k8s_cluster_installation_param"]["vim_name"] = "edge-vim"
    tacker, _, inst, _ = cluster_vnf(["10.9.0.15"], [], params=params)
    terminate = lcm_op_occ(tacker, inst, "TERMINATE", {"terminationType": "FORCEFUL"})
    tacker.vims["edge-vim"] = "vim-1"
    tacker.vim_owners["edge-vim"] = inst

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
            terminate,
            Services(tacker=tacker, inventory=inventory),  # type: ignore[arg-type]
            operation="TERMINATE",
            version=version,
        )
        plan = TerminateCluster().plan(ctx.notification)
        assert plan.outline() == [
            "confirm",
            "load-params",
            "delete-vim",
            "clear-write-back",
            "forget-inventory",
        ]
        for step in plan.steps(ctx.results):
            with contextlib.suppress(SkipStep):
                ctx.results[step.name] = await run_step(step, ctx)
        assert tacker.cleared == cleared
    # The VIM of the name INSTANTIATE's parameters gave (the TERMINATE request has none),
    # deleted for the v1 instance only (VIMs are registered for v1 instances by default).
    assert tacker.deleted_vims == ["edge-vim"]
    assert inventory.forgotten == [inst, inst]
    assert tacker.write_backs == []


async def test_registry_routes() -> None:
    registry = default_routing(cluster_handlers=True)
    routes = {(op, st): name for op, st, name in registry.routes()}
    assert routes[("INSTANTIATE", "COMPLETED")] == "cluster-instantiate"
    assert routes[("INSTANTIATE", "STARTING")] == "cluster-instantiate-validate"
    assert routes[("TERMINATE", "COMPLETED")] == "cluster-terminate"
    assert routes[(None, None)] == "log"
    plain = default_routing()
    assert ("INSTANTIATE", "COMPLETED") not in {(o, s) for o, s, _ in plain.routes()}
    assert isinstance(plain, RoutingTable)
    assert MASTER_CP == "masterNode_CP1"


async def test_terminate_after_the_instance_was_deleted_still_finds_what_it_instantiated() -> None:
    """TERMINATE then DELETE in a row (a NFVO's teardown): by the time the job runs Tacker
    answers 404 for the instance, but its op-occs remain."""
    params = k8s_params()
    params["k8s_cluster_installation_param"]["vim_name"] = "edge-vim"
    tacker, _, inst, _ = cluster_vnf(["10.9.0.15"], [], params=params)
    tacker.register_vims, tacker.vims["edge-vim"] = True, "vim-1"
    tacker.vim_owners["edge-vim"] = inst
    terminate = lcm_op_occ(tacker, inst, "TERMINATE", {"terminationType": "FORCEFUL"})
    del tacker.instances[inst]
    ctx = ctx_for(inst, terminate, Services(tacker=tacker), operation="TERMINATE")
    plan = TerminateCluster().plan(ctx.notification)
    for step in plan.steps(ctx.results):
        if step.name == "clear-write-back":
            break
        ctx.results[step.name] = await run_step(step, ctx)
    assert tacker.deleted_vims == ["edge-vim"]

    # A CNF (VNF-B) deleted right after its TERMINATE: its INSTANTIATE named only a
    # Kubernetes VIM, so its job ends at the parameters, not failed.
    tacker, _, cnf, occ = cluster_vnf(["10.9.0.16"], [])
    tacker.op_occs[occ]["operationParams"] = {"vimConnectionInfo": {"k8s": K8S_VIM}}
    terminate = lcm_op_occ(tacker, cnf, "TERMINATE")
    del tacker.instances[cnf]
    ctx = ctx_for(cnf, terminate, Services(tacker=tacker), operation="TERMINATE")
    confirm, load = TerminateCluster().plan(ctx.notification).items[:2]
    assert isinstance(confirm, Step) and isinstance(load, Step)
    ctx.results["confirm"] = await run_step(confirm, ctx)
    with pytest.raises(NotACluster):
        await run_step(load, ctx)
