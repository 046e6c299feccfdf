"""The storage server steps: their commands, guards and results (in-memory SSH, Tacker,
OpenStack). The node-side scripts themselves run for real in ``tests/host/test_storage_scripts.py``.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from handlers import steps
from handlers.drain import DrainLeaving
from handlers.heal import HealCluster
from handlers.instantiate import InstantiateCluster
from handlers.job import ClusterJob
from handlers.scale import ScaleCluster
from handlers.toolkit import storage
from schemas.cluster_params import parse_cluster_params
from subscriber.config import ClusterSettings
from subscriber.errors import PermanentStepError, SkipStep
from subscriber.kernel import JobContext, Services, Step
from subscriber.kernel.ports import PortAddresses
from tests.cluster_fakes import (
    STORAGE_CP,
    Call,
    FakeOpenStack,
    FakeSsh,
    FakeTacker,
    cluster_vnf,
    k8s_params,
    run_step,
    uid,
    with_storage_server,
)
from tests.unit.test_cluster_handlers import ctx_for

STORAGE_IP = "10.9.0.50"
STORAGE_PW = "St0rage-pw!"
VNFD = "vnfd-storage"
PV1 = """apiVersion: v1
kind: PersistentVolume
metadata:
  name: nfs-pv1
spec:
  capacity:
    storage: 1Gi
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  nfs:
    server: 0.0.0.0
    path: /volume/nfs/pv1
"""
PV2 = PV1.replace("pv1", "pv2")


def storage_params() -> dict[str, Any]:
    return with_storage_server(
        k8s_params(), username="ubuntu", password=STORAGE_PW, mount="/volume", network="10.9.0.0/24"
    )


@dataclass
class StorageNodes:
    """The storage server (its volume and exports) and a master's kubectl on
    PersistentVolumes, played on a :class:`FakeSsh` (``ssh``)."""

    fs: str | None = None  # what blkid finds on the device
    mounted: bool = False
    pvs: dict[str, dict[str, Any]] = field(default_factory=dict)
    stuck: str | None = None  # a phase applied PVs stay in (never Available)
    exports: dict[str, str] = field(default_factory=dict)
    client: dict[str, str] = field(default_factory=dict)
    ssh: FakeSsh = field(default_factory=lambda: FakeSsh(uploads=False))

    def __post_init__(self) -> None:
        self.ssh.on("get node", "node/master11")
        self.ssh.on(" delete pv ", self._delete)
        self.ssh.on("apply -f -$", self._apply)
        self.ssh.on("get pv -o json", self._list_pvs)
        self.ssh.on(r"^bash -c .*nfs-common", self._nfs_client)
        self.ssh.on(r"^bash -c .*exportfs -ra", self._exports)
        self.ssh.on(r"^bash -c .*blkid -p", self._volume)  # the latest rule is asked first

    def _volume(self, call: Call) -> str:
        if self.mounted:
            return "mounted-already"
        self.mounted = True
        if self.fs:
            return f"mounted {self.fs}"
        self.fs = "ext4"
        return "formatted+mounted"

    def _exports(self, call: Call) -> str:
        changed = self.exports.get(call.host) != call.input
        self.exports[call.host] = call.input
        return ("changed" if changed else "unchanged") + "\napplied"

    def _nfs_client(self, call: Call) -> str:
        assert path_free(call.command)
        out = self.client.setdefault(call.host, "installed")
        self.client[call.host] = "present"
        return out

    def _list_pvs(self, call: Call) -> str:
        items = [
            {
                "metadata": {"name": n},
                "spec": {
                    "nfs": {"server": pv["server"]},
                    **({"claimRef": pv["claim"]} if pv.get("claim") else {}),
                },
                "status": {"phase": pv["phase"]},
            }
            for n, pv in self.pvs.items()
        ]
        return json.dumps({"items": items})

    def _apply(self, call: Call) -> str:
        doc = json.loads(call.input)
        name = doc["metadata"]["name"]
        self.pvs[name] = {
            "server": doc["spec"]["nfs"]["server"],
            "phase": self.stuck or "Available",
            "doc": doc,
        }
        return f"persistentvolume/{name} created"

    def _delete(self, call: Call) -> str:
        self.pvs.pop(shlex.split(call.command)[-3], None)
        return ""


def path_free(command: str) -> bool:
    return STORAGE_PW not in command


def storage_vnf(
    workers: Sequence[str] = ("10.9.0.21",),
) -> tuple[FakeTacker, FakeOpenStack, str, str, str]:
    """A simple cluster plus the storage VNFC; returns (..., storage server id)."""
    tacker, openstack, inst, occ = cluster_vnf(
        ["10.9.0.11"], list(workers), params=storage_params()
    )
    stack, server = f"vnf-{inst}-storage/{uid()}", uid()
    tacker.instances[inst]["instantiatedVnfInfo"]["vnfcResourceInfo"].append(
        {
            "id": uid(),
            "vduId": "storage_server",
            "computeResource": {"resourceId": server},
            "vnfcCpInfo": [{"id": uid(), "cpdId": STORAGE_CP}],
            "metadata": {"stack_id": stack},
        }
    )
    openstack.ports[(stack, STORAGE_CP)] = PortAddresses((STORAGE_IP,))
    openstack.volumes[(stack, "storage_server_volume")] = ("/dev/vdb",)
    files = {"Files/kubernetes/nfs-pv1.yaml": PV1, "Files/kubernetes/nfs-pv2.yaml": PV2}
    tacker.onboard(inst, files, VNFD)
    return tacker, openstack, inst, occ, server


SETTINGS = ClusterSettings(pv_available_timeout=0.5)


async def run_steps(plan_steps: Sequence[Step], ctx: JobContext) -> dict[str, Any]:
    for step in plan_steps:
        try:
            ctx.results[step.name] = await run_step(step, ctx)
        except SkipStep as skip:
            ctx.results[step.name] = skip.result
    return ctx.results


@dataclass
class MemoryInventory:
    nodes_by: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    async def replace(self, vnf_instance_id: str, nodes: Sequence[Any]) -> None:
        self.nodes_by[vnf_instance_id] = tuple(nodes)

    async def nodes(self, vnf_instance_id: str) -> tuple[Any, ...]:
        return self.nodes_by.get(vnf_instance_id, ())


def job_and_ctx(
    tacker: FakeTacker,
    openstack: FakeOpenStack,
    nodes: StorageNodes,
    inst: str,
    occ: str,
    **kw: Any,
) -> tuple[ClusterJob, JobContext]:
    services = Services(
        tacker=tacker,
        openstack=openstack,
        ssh=nodes.ssh,
        inventory=MemoryInventory(),  # type: ignore[arg-type]
    )
    ctx = ctx_for(inst, occ, services, **kw)
    return ClusterJob(SETTINGS, ctx.notification), ctx


async def prepared(**kw: Any) -> tuple[ClusterJob, JobContext, StorageNodes, FakeTacker, str]:
    tacker, openstack, inst, occ, server = storage_vnf()
    nodes = StorageNodes(**kw)
    job, ctx = job_and_ctx(tacker, openstack, nodes, inst, occ)
    await run_steps([steps.confirm(job), steps.load_params(job), steps.discover_nodes(job)], ctx)
    return job, ctx, nodes, tacker, server


def names(plan: Any) -> list[str]:
    return [getattr(i, "name", None) or i.pattern for i in plan.items]


def test_the_plans_place_the_storage_steps() -> None:
    _, _, inst, occ, _ = storage_vnf()
    body = ctx_for(inst, occ, Services()).notification
    inst_plan = names(InstantiateCluster(SETTINGS).plan(body))
    assert inst_plan.index("label-workers") < inst_plan.index("storage-server")
    assert inst_plan[inst_plan.index("storage-server") :][:3] == [
        "storage-server",
        "nfs-client",
        "register-pvs",
    ]
    assert inst_plan.index("register-pvs") < inst_plan.index("write-back")
    heal_plan = names(HealCluster(SETTINGS).plan(body))
    assert {"storage-server", "nfs-client", "register-pvs"} <= set(heal_plan)
    scale_plan = names(ScaleCluster(SETTINGS).plan(body))
    assert "nfs-client" in scale_plan and "register-pvs" not in scale_plan
    drain = names(DrainLeaving(SETTINGS).plan(body))
    assert drain.index("select-leaving") < drain.index("release-pvs") < drain.index("drain-leaving")


async def test_storage_server_formats_once_mounts_and_exports_with_its_own_login() -> None:
    job, ctx, nodes, _, _ = await prepared()
    step = steps.storage_server(job)
    first = await run_step(step, ctx)
    assert first["volumes"] == {"/volume": {"device": "/dev/vdb", "done": "formatted+mounted"}}
    assert first["exportsChanged"] is True
    assert first["server"]["nicIp"] == STORAGE_IP
    mine = [c for c in nodes.ssh.calls if c.host == STORAGE_IP]
    assert {c.user for c in mine} == {"ubuntu"}
    volume = next(c for c in mine if "blkid -p" in c.command)
    assert shlex.split(volume.command)[-2:] == ["/dev/vdb", "/volume"]
    assert nodes.exports[STORAGE_IP].splitlines()[1:] == [
        "/volume/nfs/pv1 10.9.0.0/24(rw,sync,no_subtree_check,insecure,all_squash)",
        "/volume/nfs/pv2 10.9.0.0/24(rw,sync,no_subtree_check,insecure,all_squash)",
    ]
    exports = next(c for c in mine if "exportfs -ra" in c.command)
    assert shlex.split(exports.command)[-3:] == [
        storage.EXPORTS_FILE,
        "/volume/nfs/pv1",
        "/volume/nfs/pv2",
    ]
    assert all(STORAGE_PW not in c.command for c in nodes.ssh.calls)
    # A rerun changes nothing: mounted already, the same exports.
    again = await run_step(step, ctx)
    assert again["volumes"]["/volume"]["done"] == "mounted-already"
    assert again["exportsChanged"] is False
    assert STORAGE_PW not in json.dumps([first, again])


async def test_an_unattached_volume_fails_the_step_clearly() -> None:
    job, ctx, nodes, _, _ = await prepared()
    openstack = ctx.services.need_openstack()
    assert isinstance(openstack, FakeOpenStack)
    for key in list(openstack.volumes):
        openstack.volumes[key] = ()
    with pytest.raises(PermanentStepError, match=r"storage_server_volume .* not attached"):
        await run_step(steps.storage_server(job), ctx)
    assert not any("blkid" in c.command for c in nodes.ssh.calls)


async def test_nfs_client_on_every_node_then_only_on_new_ones() -> None:
    job, ctx, _, _, _ = await prepared()
    done = await run_step(steps.nfs_client(job), ctx)
    assert done == {"nodes": {"master11": "installed", "worker21": "installed"}}
    ctx.results["discover"]["changes"] = {"added": ["worker21"], "replaced": [], "departed": []}
    again = await run_step(steps.nfs_client(job), ctx)
    assert again == {"nodes": {"worker21": "present"}}


async def test_register_pvs_sets_the_server_waits_for_available_and_is_idempotent() -> None:
    job, ctx, nodes, _, _ = await prepared()
    done = await run_step(steps.register_pvs(job), ctx)
    assert done["pvs"] == {"nfs-pv1": "registered", "nfs-pv2": "registered"}
    assert {pv["server"] for pv in nodes.pvs.values()} == {STORAGE_IP}
    assert nodes.pvs["nfs-pv1"]["doc"]["spec"]["nfs"]["path"] == "/volume/nfs/pv1"
    applies = nodes.ssh.ran("apply -f -$")
    assert len(applies) == 2 and all(c.host == "10.9.0.11" for c in applies)
    again = await run_step(steps.register_pvs(job), ctx)
    assert again["pvs"] == {"nfs-pv1": "already Available", "nfs-pv2": "already Available"}
    assert len(nodes.ssh.ran("apply -f -$")) == 2


async def test_a_pv_that_never_gets_available_is_removed_and_fails_the_step() -> None:
    job, ctx, nodes, _, _ = await prepared(stuck="Pending")
    with pytest.raises(PermanentStepError, match=r"nfs-pv1 .* is Pending, not Available"):
        await run_step(steps.register_pvs(job), ctx)
    assert nodes.pvs == {}


async def test_release_pvs_refuses_while_bound_and_deletes_when_free() -> None:
    job, ctx, nodes, _, server = await prepared()
    await run_step(steps.register_pvs(job), ctx)
    release = steps.release_pvs(job)
    ctx.results["drain-request"] = {"servers": ["some-worker-server"]}
    ctx.results["select-leaving"] = {"nodes": [], "unknown": []}
    with pytest.raises(SkipStep, match="not leaving"):
        await run_step(release, ctx)
    ctx.results["drain-request"] = {"servers": [server]}
    nodes.pvs["nfs-pv2"].update(phase="Bound", claim={"namespace": "default", "name": "data"})
    with pytest.raises(PermanentStepError, match=r"nfs-pv2 \(claimed by default/data\) Bound"):
        await run_step(release, ctx)
    assert set(nodes.pvs) == {"nfs-pv1", "nfs-pv2"}
    nodes.pvs["nfs-pv2"].update(phase="Released", claim=None)
    done = await run_step(release, ctx)
    assert done["deleted"] == ["nfs-pv1", "nfs-pv2"] and nodes.pvs == {}


async def test_without_storage_server_every_storage_step_is_skipped() -> None:
    tacker, openstack, inst, occ = cluster_vnf(["10.9.0.11"], ["10.9.0.21"])
    nodes = StorageNodes()
    job, ctx = job_and_ctx(tacker, openstack, nodes, inst, occ)
    for step in (
        steps.storage_server(job),
        steps.nfs_client(job),
        steps.register_pvs(job),
    ):
        with pytest.raises(SkipStep, match="no storage_server"):
            await run_step(step, ctx)
    assert nodes.ssh.calls == []


def test_read_manifest_sets_the_server_and_refuses_what_is_not_an_nfs_pv() -> None:
    pv = storage.read_manifest(PV1.encode(), "Files/pv1.yaml", "10.1.2.3", step="s")
    doc = json.loads(pv.manifest)
    assert doc["spec"]["nfs"] == {"server": "10.1.2.3", "path": "/volume/nfs/pv1"}
    assert (pv.name, pv.export) == ("nfs-pv1", "/volume/nfs/pv1")
    for bad, why in [
        (b"kind: PersistentVolumeClaim\nmetadata: {name: x}\nspec: {nfs: {path: /a}}", "must be"),
        (b"kind: PersistentVolume\nmetadata: {name: x}\nspec: {hostPath: {path: /a}}", "must be"),
        (PV1.encode() + b"---\n" + PV2.encode(), "one PersistentVolume"),
        (b"kind: [", "not YAML"),
    ]:
        with pytest.raises(PermanentStepError, match=why):
            storage.read_manifest(bad, "Files/bad.yaml", "10.1.2.3", step="s")


def test_v2_takes_storage_server_and_pv_registration_params() -> None:
    data = copy.deepcopy(storage_params())
    params = parse_cluster_params(data, api="v2")
    assert params.storage_server is not None
    assert [p.nfs_server_cp for p in params.pv_registration_params] == [STORAGE_CP, STORAGE_CP]
    assert STORAGE_PW not in repr(params)
