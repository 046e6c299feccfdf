"""SCALE and HEAL through a real Service on real sshd hosts (stand-in kubeadm, kubectl, etcdctl).

Tacker and OpenStack are the in-memory fakes of ``tests.cluster_fakes``,
changed the way Tacker changes a VNF instance on each operation (a new worker
VNFC first; a VNFC and its stack gone; a rebuilt VNFC with a new id on the same
port); the test host of a deleted or rebuilt VM is wiped (``wipe_host``). After
each operation the cluster's Node list, every node's /etc/hosts, the etcd
members, the inventory and the VNFCs are held against each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from subscriber.config import SshSettings
from tests.cluster_fakes import (
    add_worker,
    cluster_service,
    cluster_vnf,
    k8s_params,
    lcm_op_occ,
    rebuild_vnfc,
    remove_vnfc,
)
from tests.ssh.cluster import CLUSTER, Cluster, name_of, start

from .conftest import testhosts

pytestmark = [pytest.mark.ssh, pytest.mark.asyncio, pytest.mark.usefixtures("restore_hostnames")]


def kubeadm_calls(bed: Any, verb: str, host: str) -> list[dict[str, Any]]:
    return [
        c
        for c in bed.calls()
        if c["tool"] == "kubeadm"
        and c["argv"][:1] == [verb]
        and c["argv"][1:2] != ["phase"]
        and c["host"] == host
        and c["rc"] == 0
    ]


async def test_scale_out_then_scale_in(bed: Any, ssh_settings: SshSettings, tmp_path: Path) -> None:
    master, w1, w2, w3 = bed.hosts[0:4]
    c = await start(bed, ssh_settings, tmp_path, [master], [w1])
    try:
        # SCALE_OUT by two: both join (one join step, in parallel), old nodes learn their names.
        add_worker(c.tacker, c.openstack, c.inst, w2.address)
        add_worker(c.tacker, c.openstack, c.inst, w3.address)
        event = await c.notify("SCALE", lcm_op_occ(c.tacker, c.inst, "SCALE"))
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        steps = await c.steps(event.id)
        assert steps["retire-nodes"] == "skipped" and steps["join-workers"] == "done"
        assert await c.check_agrees() == {
            name_of(master, "master"),
            *(name_of(w, "worker") for w in (w1, w2, w3)),
        }
        assert kubeadm_calls(bed, "join", name_of(w2, "worker"))

        # SCALE_IN: Tacker deleted w3's VM; its node is deleted, /etc/hosts forgets it.
        remove_vnfc(c.tacker, c.openstack, c.inst, w3.address)
        testhosts.wipe_host(bed, w3)
        event = await c.notify("SCALE", lcm_op_occ(c.tacker, c.inst, "SCALE"))
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        gone = name_of(w3, "worker")
        assert gone not in await c.check_agrees()
        _, rows = await c.svc.store.jobs.resume_state(event.id)
        retire = next(r for r in rows if r.name == "retire-nodes")
        assert retire.result_json()["retired"] == [gone]
    finally:
        await c.svc.stop()


async def test_heal_worker_rejoins_under_its_name(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    master, w1, w2 = bed.hosts[0:3]
    c = await start(bed, ssh_settings, tmp_path, [master], [w1, w2])
    try:
        c.bed.calls_log.write_text("")
        rebuild_vnfc(c.tacker, c.openstack, c.inst, w1.address)
        testhosts.wipe_host(bed, w1)
        event = await c.notify("HEAL", lcm_op_occ(c.tacker, c.inst, "HEAL"))
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        healed = name_of(w1, "worker")
        calls = bed.calls()
        deleted = [
            i
            for i, x in enumerate(calls)
            if x["tool"] == "kubectl"
            and x["argv"][:3] == ["--kubeconfig", "/etc/kubernetes/admin.conf", "delete"]
            and healed in x["argv"]
        ]
        joined = [
            i
            for i, x in enumerate(calls)
            if x["tool"] == "kubeadm"
            and x["argv"][:1] == ["join"]
            and x["host"] == healed
            and x["rc"] == 0
        ]
        assert deleted and joined and deleted[0] < joined[0]  # old Node object first, then the join
        assert not kubeadm_calls(bed, "join", name_of(w2, "worker"))  # the healthy one untouched
        assert healed in await c.check_agrees()
        steps = await c.steps(event.id)
        assert steps["write-back"] == "skipped"  # same cluster, same CA: nothing to tell Tacker
        assert len(c.tacker.write_backs) == 1
    finally:
        await c.svc.stop()


@pytest.mark.parametrize("which", [1, 0], ids=["second-master", "main-master"])
async def test_heal_master_of_ha_cluster(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path, which: int
) -> None:
    masters, worker = bed.hosts[0:3], bed.hosts[3]
    c = await start(bed, ssh_settings, tmp_path, masters, [worker])
    try:
        target = masters[which]
        healed = name_of(target, "master")
        old_member = next(m for m in bed.state()["etcd"].values() if m["name"] == healed)
        rebuild_vnfc(c.tacker, c.openstack, c.inst, target.address)
        testhosts.wipe_host(bed, target)
        event = await c.notify("HEAL", lcm_op_occ(c.tacker, c.inst, "HEAL"))
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        new_member = next(m for m in bed.state()["etcd"].values() if m["name"] == healed)
        assert new_member["ID"] != old_member["ID"]  # removed, then added by the join
        joins = kubeadm_calls(bed, "join", healed)
        if which:  # INSTANTIATE joined it once already; the main master had inited
            assert len(joins) == 2
        assert "--control-plane" in joins[-1]["argv"]
        assert not kubeadm_calls(bed, "init", healed)[1:]  # never a second cluster
        await c.check_agrees()
        # Every master's haproxy sends to every master again.
        for m in masters:
            cfg = (Path(bed.root) / "hosts" / m.name / "fs").rglob("haproxy.cfg")
            text = next(iter(cfg)).read_text()
            assert all(
                f"server  {name_of(x, 'master')} {x.address}:6443 check" in text for x in masters
            ), text
        _, rows = await c.svc.store.jobs.resume_state(event.id)
        retire = next(r for r in rows if r.name == "retire-nodes").result_json()
        assert retire["retired"] == [healed] and retire["etcdMembers"] == [f"{old_member['ID']:x}"]
    finally:
        await c.svc.stop()


async def test_heal_of_a_single_master_is_refused(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    master, worker = bed.hosts[0:2]
    c = await start(bed, ssh_settings, tmp_path, [master], [worker])
    try:
        rebuild_vnfc(c.tacker, c.openstack, c.inst, master.address)
        testhosts.wipe_host(bed, master)
        event = await c.notify("HEAL", lcm_op_occ(c.tacker, c.inst, "HEAL"))
        assert event.status == "failed"
        job, _ = await c.svc.store.jobs.resume_state(event.id)
        assert job is not None and "heal the whole VNF" in (job.last_error or "")
        assert not kubeadm_calls(bed, "init", name_of(master, "master"))[1:]
    finally:
        await c.svc.stop()


async def test_heal_whole_vnf_rebuilds_and_writes_back_anew(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    master, worker = bed.hosts[0:2]
    c = await start(bed, ssh_settings, tmp_path, [master], [worker])
    try:
        old_ca = bed.state()["cluster"]["ca_crt"]
        for host in (master, worker):
            rebuild_vnfc(c.tacker, c.openstack, c.inst, host.address)
        # Tacker has (v2) reset nothing: our first entry is still there.
        c.tacker.instances[c.inst]["vimConnectionInfo"] = {
            "k8s": {
                "interfaceInfo": {
                    "endpoint": f"https://{master.address}:6443",
                    "ssl_ca_cert": old_ca,
                }
            }
        }
        testhosts.reset_cluster(bed)  # every VM is new, and so is the cluster
        event = await c.notify("HEAL", lcm_op_occ(c.tacker, c.inst, "HEAL"))
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        new_ca = bed.state()["cluster"]["ca_crt"]
        assert new_ca != old_ca
        assert len(c.tacker.write_backs) == 2
        (_, access, _) = c.tacker.write_backs[-1]
        assert access.ssl_ca_cert == new_ca and access.endpoint == f"https://{master.address}:6443"
        await c.check_agrees()
    finally:
        await c.svc.stop()


async def test_missed_scale_in_converges_on_the_next_event(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    master, w1, w2 = bed.hosts[0:3]
    c = await start(bed, ssh_settings, tmp_path, [master], [w1, w2])
    try:
        # The SCALE_IN's notifications were lost: w2 is gone but nobody told us.
        remove_vnfc(c.tacker, c.openstack, c.inst, w2.address)
        testhosts.wipe_host(bed, w2)
        # The next operation converges all the same.
        event = await c.notify("SCALE", lcm_op_occ(c.tacker, c.inst, "SCALE"))
        assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
        assert name_of(w2, "worker") not in await c.check_agrees()
    finally:
        await c.svc.stop()


async def test_workers_are_labelled_with_host_and_zone(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    """CIS-node for anti-affinity workers, the zone when asked; a healed worker's new host."""
    testhosts.reset_cluster(bed)
    master, w1, w2 = bed.hosts[0:3]
    params = k8s_params(master_user="root", worker_user="root", key=str(bed.client_key))
    params["k8s_cluster_installation_param"]["label_zone"] = True
    tacker, openstack, inst, occ = cluster_vnf(
        [master.address], [w1.address, w2.address], params=params
    )
    vnfcs = tacker.instances[inst]["instantiatedVnfInfo"]["vnfcResourceInfo"]
    server = {v["vduId"] + str(i): v["computeResource"]["resourceId"] for i, v in enumerate(vnfcs)}
    openstack.anti_affinity = {server["workerNode1"]}  # w1 is in the anti-affinity group
    openstack.zones = {server["workerNode1"]: "az-1", server["workerNode2"]: "az-2"}
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"
    svc = await cluster_service(db_url, tacker, openstack, CLUSTER, ssh=ssh_settings)
    c = Cluster(bed, svc, tacker, openstack, inst)
    try:
        event = await c.notify("INSTANTIATE", occ)
        assert event.status == "done", await svc.store.jobs.resume_state(event.id)
        nodes = bed.state()["nodes"]
        one, two = nodes[name_of(w1, "worker")], nodes[name_of(w2, "worker")]
        assert one["labels"]["CIS-node"] == openstack.hosts[server["workerNode1"]]
        assert one["labels"]["topology.kubernetes.io/zone"] == "az-1"
        assert "CIS-node" not in two["labels"]  # not in an anti-affinity group
        assert two["labels"]["topology.kubernetes.io/zone"] == "az-2"

        # Healed onto another compute host (and still in the group): the label follows.
        new_vnfc = rebuild_vnfc(tacker, openstack, inst, w1.address)
        new_server = next(v for v in vnfcs if v["id"] == new_vnfc)["computeResource"]["resourceId"]
        openstack.anti_affinity.add(new_server)
        testhosts.wipe_host(bed, w1)
        event = await c.notify("HEAL", lcm_op_occ(tacker, inst, "HEAL"))
        assert event.status == "done", await svc.store.jobs.resume_state(event.id)
        labels = bed.state()["nodes"][name_of(w1, "worker")]["labels"]
        assert labels["CIS-node"] == openstack.hosts[new_server] == "compute-8"
    finally:
        await svc.stop()
