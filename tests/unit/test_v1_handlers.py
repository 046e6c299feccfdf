"""The cluster handlers on instances of Tacker's v1 API (seeds 000 and 001), with the
in-memory Tacker and OpenStack shaped as Tacker 16.0.0's v1 shows a BaseHOT instance:
VNFCs that name their Nova server but no stack, ``operationParams`` as JSON text, the
instantiation's parameters saved on the instance (snake_case, or camelCase as older
Tacker showed them), a ``vimConnectionInfo`` list, and the VIM lifecycle of Tacker's
v1 driver."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import pytest

from handlers.heal import HealCluster
from handlers.instantiate import InstantiateCluster
from handlers.terminate import TerminateCluster
from handlers.toolkit.params import load_params
from handlers.toolkit.topology import discover
from schemas.cluster_params import parse_cluster_params
from schemas.lcm import saved_params
from subscriber.errors import SkipStep, VimNotOurs
from subscriber.kernel import JobContext, Services
from subscriber.kernel.ports import ClusterNode
from subscriber.kernel.results import result_json
from tests.cluster_fakes import (
    ACCESS,
    FakeOpenStack,
    FakeSsh,
    FakeTacker,
    access_reply,
    cluster_vnf,
    job_context,
    lcm_notification,
    lcm_op_occ,
    rebuild_vnfc,
    run_step,
    uid,
)
from tests.factories import v1_op_occ
from tests.testbed.cluster_vnf import camel_case, v1_params

pytestmark = pytest.mark.asyncio

TOKEN = "v1-bearer-" + uid()
CA = "-----BEGIN CERTIFICATE-----\nv1\n-----END CERTIFICATE-----\n"


def ctx_for(
    inst: str, occ: str, services: Services, *, operation: str = "INSTANTIATE"
) -> JobContext:
    body = v1_op_occ(instance=inst, op_occ_id=occ, operation=operation, state="COMPLETED")
    return job_context(body, services)


class Inventory:
    """The cluster inventory, in memory."""

    def __init__(self) -> None:
        self.stored: dict[str, list[ClusterNode]] = {}
        self.forgotten: list[str] = []

    async def replace(self, vnf_instance_id: str, nodes: Sequence[ClusterNode]) -> None:
        self.stored[vnf_instance_id] = list(nodes)

    async def nodes(self, vnf_instance_id: str) -> list[ClusterNode]:
        return list(self.stored.get(vnf_instance_id, []))

    async def forget(self, vnf_instance_id: str) -> int:
        self.forgotten.append(vnf_instance_id)
        return len(self.stored.pop(vnf_instance_id, []))


def services(tacker: FakeTacker, openstack: FakeOpenStack | None = None) -> Services:
    return Services(tacker=tacker, openstack=openstack, ssh=ssh(), inventory=Inventory())


def ssh() -> FakeSsh:
    fake = FakeSsh()
    fake.on(r"get secret .*\.data\.token", base64.b64encode(TOKEN.encode()).decode())
    fake.on(r"cat /etc/kubernetes/pki/ca\.crt", CA)
    fake.on(ACCESS, access_reply(CA, TOKEN))
    return fake


async def run_plan(
    plan_items: Any, ctx: JobContext, only: tuple[str, ...] | None = None
) -> dict[str, str]:
    """Run the plan's steps (those named in ``only``, else every one) as the runner
    would, each seeing the results before it; (step -> "done" | "skipped: why")."""
    outcome: dict[str, str] = {}
    for step in plan_items.steps(ctx.results):
        if only is not None and step.name not in only:
            continue
        try:
            ctx.results[step.name] = await run_step(step, ctx)
            outcome[step.name] = "done"
        except SkipStep as skip:
            ctx.results[step.name] = result_json(skip.result) if skip.result else {}
            outcome[step.name] = f"skipped: {skip.reason}"
    return outcome


# ----------------------------------------------------------------- discovery


async def test_v1_discovery_finds_each_vnfc_by_its_server() -> None:
    tacker, openstack, inst, _ = cluster_vnf(["10.9.1.5"], ["10.9.1.6", "10.9.1.7"], api="v1")
    vnfcs = tacker.instances[inst]["instantiatedVnfInfo"]["vnfcResourceInfo"]
    assert not any("metadata" in v for v in vnfcs)  # as v1 shows them: no stack_id
    params = parse_cluster_params(v1_params(), api="v1")
    topo = await discover(tacker.instances[inst], params, openstack)
    assert [n.name for n in topo.nodes] == ["master5", "worker6", "worker7"]
    assert topo.endpoint == "https://10.9.1.5:6443"
    # One read of the instance's stack tree, not one per VNFC.
    assert openstack.calls.count(("server-stacks", f"vnflcm_{inst}")) == 1
    assert all(n.server_id and n.stack_id for n in topo.nodes)


async def test_v1_ha_vip_comes_from_the_vnflcm_stack() -> None:
    masters = ["10.9.1.11", "10.9.1.12", "10.9.1.13"]
    tacker, openstack, inst, _ = cluster_vnf(masters, ["10.9.1.21"], vip="10.9.1.99", api="v1")
    params = parse_cluster_params(v1_params(ha=True), api="v1")
    topo = await discover(tacker.instances[inst], params, openstack)
    assert topo.cluster_ip == "10.9.1.99" and topo.endpoint == "https://10.9.1.99:16443"
    assert (f"vnflcm_{inst}", "vip_CP") in openstack.calls


# ----------------------------------------------------------------- parameters and API


async def test_reads_go_to_the_instances_own_api() -> None:
    tacker, openstack, inst, occ = cluster_vnf(["10.9.1.5"], ["10.9.1.6"], api="v1")
    ctx = ctx_for(inst, occ, services(tacker, openstack))
    plan = InstantiateCluster().plan(ctx.notification)
    outcome = await run_plan(plan, ctx, only=("confirm", "load-params", "discover"))
    assert set(outcome.values()) == {"done"}
    assert ctx.results["load-params"]["api"] == "v1"
    assert tacker.apis and set(tacker.apis) == {"v1"}  # never the configured default


@pytest.mark.parametrize("spelling", ["snake_case", "camelCase"])
async def test_saved_params_are_read_in_both_spellings(spelling: str) -> None:
    """A v1 SCALE request repeats no parameters: they come from the instance, where older
    Tacker showed them camelCase (seed 000: ``k8sClusterInstallationParam``,
    ``masterNode.sshCpName``); the request's credential overrides still apply."""
    tacker, _, inst, _ = cluster_vnf(["10.9.1.5"], ["10.9.1.6"], api="v1")
    saved = v1_params(
        master_user="ubuntu", worker_user="ubuntu", password="old-pw", vim_name="edge"
    )
    saved["k8s_cluster_installation_param"]["proxy"] = {"k8s_node_cidr": "10.9.1.0/24"}
    if spelling == "camelCase":
        saved = {
            **{k: v for k, v in saved.items() if k != "k8s_cluster_installation_param"},
            "k8sClusterInstallationParam": camel_case(saved["k8s_cluster_installation_param"]),
        }
        assert "sshCpName" in str(saved)
    tacker.instances[inst]["instantiatedVnfInfo"]["additionalParams"] = saved
    scale = lcm_op_occ(
        tacker,
        inst,
        "SCALE",
        {"worker_node_password": "new-pw-123"},
        request={"type": "SCALE_OUT", "aspectId": "worker_instance", "numberOfSteps": 1},
    )
    assert isinstance(tacker.op_occs[scale]["operationParams"], str)  # v1: JSON text
    ctx = ctx_for(inst, scale, Services(tacker=tacker), operation="SCALE")
    params = await load_params(tacker, lcm_notification(ctx))
    assert params.api_version == "v1"
    assert params.vim_name == "edge"
    assert params.master_node.aspect_id == "master_instance"
    assert params.proxy is not None and params.proxy.k8s_node_cidr == "10.9.1.0/24"
    assert params.master_node.password is not None
    assert params.master_node.password.get_secret_value() == "old-pw"
    assert params.worker_node.password is not None
    assert params.worker_node.password.get_secret_value() == "new-pw-123"
    assert saved_params({"additionalParams": {}}) == {}


async def test_a_v1_heal_keeps_the_vnfc_id_and_the_new_server_says_it_was_rebuilt() -> None:
    tacker, openstack, inst, _ = cluster_vnf(["10.9.1.5"], ["10.9.1.6", "10.9.1.7"], api="v1")
    svc = services(tacker, openstack)
    topo = await discover(
        tacker.instances[inst], parse_cluster_params(v1_params(), api="v1"), openstack
    )
    assert svc.inventory is not None
    await svc.inventory.replace(inst, topo.nodes)
    vnfc = rebuild_vnfc(tacker, openstack, inst, "10.9.1.7")
    assert vnfc == topo.node("worker7").vnfc_id  # v1: the same VNFC, a new server
    heal = lcm_op_occ(tacker, inst, "HEAL")
    ctx = ctx_for(inst, heal, svc, operation="HEAL")
    outcome = await run_plan(
        HealCluster().plan(ctx.notification), ctx, only=("confirm", "load-params", "discover")
    )
    assert outcome["discover"] == "done"
    changes = ctx.results["discover"]["changes"]
    assert changes == {"added": [], "replaced": ["worker7"], "departed": []}


# ----------------------------------------------------------------- the VIM lifecycle


async def test_instantiate_registers_the_vim_and_appends_the_v1_entry() -> None:
    tacker, openstack, inst, occ = cluster_vnf(["10.9.1.5"], ["10.9.1.6"], api="v1")
    ctx = ctx_for(inst, occ, services(tacker, openstack))
    plan = InstantiateCluster().plan(ctx.notification)
    outcome = await run_plan(
        plan,
        ctx,
        only=("confirm", "load-params", "discover", "cluster-access", "register-vim", "write-back"),
    )
    assert set(outcome.values()) == {"done"}, outcome
    # Registered by default for a v1 instance, under Tacker's default name.
    name = f"kubernetes_vim_{inst}"
    assert tacker.vims == {name: ctx.results["register-vim"]["vimId"]}
    assert tacker.vim_owners[name] == inst
    [(_, access, api)] = tacker.write_backs
    assert api == "v1" and access.vim_id == tacker.vims[name]
    assert access.endpoint == "https://10.9.1.5:6443"
    # Appended after the OpenStack VIM's entry, which Tacker's own operations use.
    first, ours = tacker.instances[inst]["vimConnectionInfo"]
    assert first["vimType"] == "openstack"
    assert ours["vimType"] == "kubernetes"
    assert ours["accessInfo"] == {"authUrl": "https://10.9.1.5:6443"}

    # Replayed: the VIM of ours is reused and the entry is there, so nothing is sent again.
    again = ctx_for(inst, occ, services(tacker, openstack))
    outcome = await run_plan(
        InstantiateCluster().plan(again.notification),
        again,
        only=("confirm", "load-params", "discover", "cluster-access", "register-vim", "write-back"),
    )
    assert outcome["write-back"].startswith("skipped")
    assert len(tacker.write_backs) == 1 and len(tacker.vims) == 1


async def test_a_vim_of_that_name_that_is_not_ours_is_never_taken() -> None:
    tacker, openstack, inst, occ = cluster_vnf(
        ["10.9.1.5"], [], api="v1", params=v1_params(vim_name="shared")
    )
    tacker.vims["shared"] = "someone-elses"
    tacker.vim_owners["shared"] = "another-instance"
    ctx = ctx_for(inst, occ, services(tacker, openstack))
    plan = InstantiateCluster().plan(ctx.notification)
    with pytest.raises(VimNotOurs):
        await run_plan(
            plan, ctx, only=("confirm", "load-params", "discover", "cluster-access", "register-vim")
        )
    assert tacker.vims == {"shared": "someone-elses"} and tacker.write_backs == []


@pytest.mark.parametrize("whole", [True, False])
async def test_heal_registers_the_vim_anew_only_after_a_whole_vnf_heal(whole: bool) -> None:
    tacker, openstack, inst, _ = cluster_vnf(["10.9.1.5"], ["10.9.1.6"], api="v1")
    name = f"kubernetes_vim_{inst}"
    tacker.vims[name], tacker.vim_owners[name] = "old-vim", inst
    vnfc = tacker.instances[inst]["instantiatedVnfInfo"]["vnfcResourceInfo"][1]["id"]
    heal = lcm_op_occ(tacker, inst, "HEAL", request={} if whole else {"vnfcInstanceId": [vnfc]})
    ctx = ctx_for(inst, heal, services(tacker, openstack), operation="HEAL")
    plan = HealCluster().plan(ctx.notification)
    assert "register-vim" in plan.outline()
    outcome = await run_plan(
        plan,
        ctx,
        only=("confirm", "load-params", "discover", "cluster-access", "register-vim", "write-back"),
    )
    if whole:
        assert outcome["register-vim"] == "done"
        assert tacker.vims[name] != "old-vim"  # new CA and token: registered anew
        [(_, access, _)] = tacker.write_backs
        assert access.vim_id == tacker.vims[name]
    else:
        assert outcome["register-vim"].startswith("skipped: the heal kept the cluster")
        assert tacker.vims[name] == "old-vim"


async def test_terminate_deletes_the_vim_whatever_its_name_and_patches_nothing() -> None:
    """After TERMINATE the v1 instance is NOT_INSTANTIATED: Tacker reset its
    vimConnectionInfo and would refuse a PATCH of it, and it keeps no parameters any
    more: the custom ``vim_name`` is found from the INSTANTIATE op-occ (JSON text)."""
    tacker, _, inst, _ = cluster_vnf(
        ["10.9.1.5"], [], api="v1", params=v1_params(vim_name="edge-vim")
    )
    tacker.vims["edge-vim"], tacker.vim_owners["edge-vim"] = "vim-1", inst
    tacker.vims["other"], tacker.vim_owners["other"] = "vim-2", "another-instance"
    instance = tacker.instances[inst]
    instance["instantiationState"] = "NOT_INSTANTIATED"
    del instance["instantiatedVnfInfo"]
    instance["vimConnectionInfo"] = []
    terminate = lcm_op_occ(tacker, inst, "TERMINATE", request={"terminationType": "FORCEFUL"})
    ctx = ctx_for(inst, terminate, services(tacker), operation="TERMINATE")
    outcome = await run_plan(TerminateCluster().plan(ctx.notification), ctx)
    assert outcome["delete-vim"] == "done"
    assert ctx.results["delete-vim"]["deleted"] == ["edge-vim"]
    assert tacker.vims == {"other": "vim-2"}
    assert outcome["clear-write-back"].startswith("skipped: the instance is not instantiated")
    assert tacker.cleared == [] and tacker.write_backs == []
    assert set(tacker.apis) == {"v1"}
