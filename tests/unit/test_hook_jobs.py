"""The cluster jobs when a management-driver hook asked for them (``schemas.hooks``): what
``confirm`` accepts of a hook's claim, the instance the job reads (the one Tacker handed
the hook, its database being written only at the end), the entry handed back instead of
PATCHed, a later COMPLETED that must not run the job again, and the rollbacks' plans."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pydantic import SecretStr

from handlers.instantiate import InstantiateCluster
from handlers.job import ClusterJob
from handlers.rollback import RollbackInstantiate, RollbackScale
from handlers.steps import confirm, discover_nodes, drain_request, reset_nodes, write_back
from schemas.hooks import hook_key
from subscriber.config import ClusterSettings
from subscriber.errors import EndJob, EventRejected, PermanentStepError
from subscriber.kernel import JobContext, Services
from subscriber.kernel.ports import ClusterNode, KubernetesAccess
from tests.cluster_fakes import FakeSsh, Reply, cluster_vnf, job_context, run_step, uid
from tests.factories import op_occ

pytestmark = pytest.mark.asyncio


class Values:
    """The store's small values, in memory."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    async def get_value(self, key: str) -> str | None:
        return self.values.get(key)


class Answers:
    def __init__(self) -> None:
        self.handed: list[tuple[str, str, KubernetesAccess]] = []

    async def hand_back(
        self, op_occ_id: str, vnf_instance_id: str, access: KubernetesAccess
    ) -> None:
        self.handed.append((op_occ_id, vnf_instance_id, access))


class Inventory:
    def __init__(self, nodes: list[ClusterNode]) -> None:
        self.kept = {n.name: n for n in nodes}
        self.replaced: list[list[str]] = []

    async def replace(self, vnf_instance_id: str, nodes: Any) -> None:
        self.replaced.append([n.name for n in nodes])

    async def nodes(self, vnf_instance_id: str) -> list[ClusterNode]:
        return list(self.kept.values())

    async def forget(self, vnf_instance_id: str) -> int:
        return len(self.kept)


def ctx_for(
    instance: str,
    occ: str,
    services: Services,
    *,
    source: str,
    operation: str = "INSTANTIATE",
    state: str = "COMPLETED",
) -> JobContext:
    body = op_occ(instance=instance, op_occ_id=occ, operation=operation, state=state)
    return job_context(body, services, source=source)


def during_instantiate() -> tuple[Any, Any, str, str, dict[str, Any]]:
    """A v2 INSTANTIATE inside its ``instantiate_end``: Tacker's database still says
    NOT_INSTANTIATED, the instance the hook was handed has the VNFCs."""
    tacker, openstack, inst, occ = cluster_vnf(["10.9.0.15"], ["10.9.0.16", "10.9.0.17"])
    handed = copy.deepcopy(tacker.instances[inst])
    tacker.instances[inst] = {
        "id": inst,
        "vnfdId": "vnfd-1",
        "instantiationState": "NOT_INSTANTIATED",
    }
    tacker.op_occs[occ]["operationState"] = "PROCESSING"
    return tacker, openstack, inst, occ, handed


def remember(values: Values, occ: str, state: str, point: str, **request: Any) -> None:
    values.values[hook_key(occ, state)] = json.dumps({"point": point, **request})


async def test_confirm_takes_a_hooks_claim_while_tacker_runs_the_operation() -> None:
    tacker, openstack, inst, occ, handed = during_instantiate()
    values = Values()
    remember(values, occ, "COMPLETED", "instantiate_end", vnfInstance=handed)
    services = Services(tacker=tacker, openstack=openstack, values=values)  # type: ignore[arg-type]
    step = confirm(
        ClusterJob(ClusterSettings(), ctx_for(inst, occ, services, source="hook").notification)
    )
    ctx = ctx_for(inst, occ, services, source="hook")
    confirmed = await run_step(step, ctx)
    assert confirmed["hook"] == "instantiate_end" and confirmed["operationState"] == "PROCESSING"
    # The same claim from a notification: Tacker says PROCESSING, not COMPLETED.
    with pytest.raises(EventRejected, match="it is PROCESSING"):
        await run_step(step, ctx_for(inst, occ, services, source="http"))
    # A hook's claim before any script can run, or one nobody made, is refused too.
    tacker.op_occs[occ]["operationState"] = "STARTING"
    with pytest.raises(EventRejected, match="STARTING, before any script runs"):
        await run_step(step, ctx)
    tacker.op_occs[occ]["operationState"] = "PROCESSING"
    values.values.clear()
    with pytest.raises(EventRejected, match="no hook request is kept"):
        await run_step(step, ctx)


async def test_a_completed_after_the_hook_ran_its_job_ends_at_confirm() -> None:
    """A retried op-occ: the hook's job ran (resumed) and Tacker then says COMPLETED in a
    new attempt; that COMPLETED must not build the cluster again."""
    tacker, openstack, inst, occ, handed = during_instantiate()
    tacker.op_occs[occ]["operationState"] = "COMPLETED"
    values = Values()
    remember(values, occ, "COMPLETED", "instantiate_end", vnfInstance=handed)
    services = Services(tacker=tacker, openstack=openstack, values=values)  # type: ignore[arg-type]
    ctx = ctx_for(inst, occ, services, source="http")
    plan = InstantiateCluster().plan(ctx.notification)
    first = next(plan.steps(ctx.results))
    with pytest.raises(EndJob, match="ran when its instantiate_end hook asked for it"):
        await run_step(first, ctx)
    # Without a hook, the same COMPLETED is today's trigger.
    values.values.clear()
    assert (await run_step(first, ctx))["hook"] is None


async def test_a_hooks_job_reads_the_instance_it_was_handed_and_hands_its_entry_back() -> None:
    tacker, openstack, inst, occ, handed = during_instantiate()
    values, answers = Values(), Answers()
    remember(values, occ, "COMPLETED", "instantiate_end", vnfInstance=handed)
    inventory = Inventory([])
    services = Services(
        tacker=tacker,
        openstack=openstack,
        values=values,  # type: ignore[arg-type]
        answers=answers,
        inventory=inventory,  # type: ignore[arg-type]
    )
    ctx = ctx_for(inst, occ, services, source="hook")
    job = ClusterJob(ClusterSettings(), ctx.notification)
    found = await run_step(discover_nodes(job), ctx)
    assert [n["name"] for n in found["workers"]] == ["worker16", "worker17"]
    assert inventory.replaced == [["master15", "worker16", "worker17"]]
    # Without the hook the same job asks Tacker, which has no VNFC yet.
    job_http = ClusterJob(ClusterSettings(), ctx.notification)
    with pytest.raises(PermanentStepError, match="NOT_INSTANTIATED"):
        await run_step(discover_nodes(job_http), ctx_for(inst, occ, services, source="http"))

    ctx.results["discover"] = found
    ctx.results["cluster-access"] = {"endpoint": found["endpoint"], "sslCaCert": "PEM"}
    ssh = FakeSsh().on(r"get secret", Reply("dG9rZW4tdmFsdWUtMTIz"))
    hooked = ctx_for(inst, occ, services.merged(Services(ssh=ssh)), source="hook")
    hooked.results.update(ctx.results)
    written = await run_step(write_back(job), hooked)
    assert written == {"endpoint": found["endpoint"], "modifyOpOccId": None, "handedBack": True}
    assert tacker.write_backs == []  # no PATCH (Tacker refuses one while the op-occ runs)
    [(to_occ, to_inst, access)] = answers.handed
    assert (to_occ, to_inst, access.endpoint) == (occ, inst, found["endpoint"])
    assert isinstance(access.bearer_token, SecretStr) and access.bearer_token.get_secret_value()


async def test_the_drain_reads_its_servers_from_the_hooks_request() -> None:
    tacker, _, inst, _ = cluster_vnf(["10.9.0.15"], ["10.9.0.16"])
    occ, values = uid(), Values()
    services = Services(tacker=tacker, values=values)  # type: ignore[arg-type]
    ctx = ctx_for(inst, occ, services, source="http", operation="SCALE", state="PROCESSING")
    step = drain_request(ClusterJob(ClusterSettings(), ctx.notification))
    with pytest.raises(EndJob, match="no drain requested"):
        await run_step(step, ctx)
    remember(values, occ, "PROCESSING", "scale_start", servers=["s2", "s1"])
    assert await run_step(step, ctx) == {"servers": ["s1", "s2"]}


async def test_a_rollback_resets_every_node_of_the_inventory() -> None:
    nodes = [
        ClusterNode(
            name="master15", role="master", vnfc_id="a", nic_ip="10.9.0.15", ssh_ip="10.9.0.15"
        ),
        ClusterNode(
            name="worker16", role="worker", vnfc_id="b", nic_ip="10.9.0.16", ssh_ip="10.9.0.16"
        ),
    ]
    tacker, _, inst, occ = cluster_vnf(["10.9.0.15"], ["10.9.0.16"])
    tacker.op_occs[occ]["operationState"] = "ROLLING_BACK"
    ssh = FakeSsh()
    services = Services(tacker=tacker, ssh=ssh, inventory=Inventory(nodes))  # type: ignore[arg-type]
    ctx = ctx_for(inst, occ, services, source="http", state="ROLLING_BACK")
    plan = RollbackInstantiate().plan(ctx.notification)
    assert plan.outline() == [
        "confirm",
        "load-params",
        "reset-nodes",
        "delete-vim",
        "forget-inventory",
    ]
    job = ClusterJob(ClusterSettings(), ctx.notification)
    reset = await run_step(reset_nodes(job), ctx)
    assert reset == {"reset": ["master15", "worker16"], "unreachable": []}
    assert {c.host for c in ssh.ran(r"kubeadm reset -f && rm -f /tmp/installed")} == {
        "10.9.0.15",
        "10.9.0.16",
    }
    scale = RollbackScale().plan(ctx.notification)
    assert scale.outline() == [
        "confirm",
        "load-params",
        "discover",
        "configure-hosts",
        "reconcile-membership",
    ]
