"""Issue 27 end to end: seed 000's v1 API, driven by the real Tacker 16.0.0.

Tacker runs the v1 package (BaseHOT + LCM operation user data, aspects
``master_instance`` / ``worker_instance``) on the simulated OpenStack, registered as an
OpenStack VIM, whose VNFC ports carry the sshd test hosts' addresses.
``lccn-subscriber serve`` (a subprocess) speaks v1: it subscribes itself through
``/vnflcm/v1`` with generated BASIC credentials, takes Tacker's v1 notifications (no
Content-Type, no Version), finds the nodes from the VNFCs' servers (v1 shows no
``metadata.stack_id``), builds the stand-in cluster, appends its entry to the v1
``vimConnectionInfo`` list, and follows SCALE by aspect, HEAL of a worker, of a master
and of the whole VNF, and TERMINATE. After each operation :meth:`Loop.check_agreement`
holds Tacker's VNFCs, the cluster's nodes, every /etc/hosts and our inventory against
each other.

The Kubernetes VIM is not registered here (``tacker.register_vim: false``): Tacker
registers one only after reaching the cluster's API server, which the stand-in hosts do
not have. Its lifecycle is proven against the in-memory Tacker
(``tests/unit/test_v1_handlers.py``), Tacker's VIM API (``tests/security/test_vim.py``) and,
with the bed's Barbican and a real API server, ``tests/k8s/test_full_loop.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.testbed import tacker_bed as tb
from tests.testbed import testhosts
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import wait_for
from tests.testbed.tacker_serve import ServeProcess, subscribed_serve
from tests.testbed.tacker_v1 import V1Tacker

from .conftest import serve_config
from .day2_v1 import V1Loop

pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("fresh_cluster")]


@pytest.fixture(scope="session")
def v1_tacker(bed: tb.BedState) -> V1Tacker:
    return V1Tacker(bed.url)


@pytest.fixture(scope="session")
def host_vim(bed: tb.BedState, v1_tacker: V1Tacker, host_sim: SimProcess) -> str:
    """The hosts' simulated cloud as an OpenStack VIM, as seed 000 registers one."""
    return v1_tacker.register_openstack_vim(
        bed, host_sim.auth_url, host_sim.openstack_settings(), f"e2e-{uuid.uuid4().hex[:8]}"
    )


@pytest.fixture
def v1_serve(
    bed: tb.BedState, v1_tacker: V1Tacker, host_sim: SimProcess, hosts: Any, tmp_path: Path
) -> Iterator[ServeProcess]:
    config = serve_config(bed, host_sim, hosts)
    config["tacker"] = {**config["tacker"], "api_version": "v1", "register_vim": False}
    with subscribed_serve(v1_tacker, tmp_path, config) as proc:
        yield proc


@pytest.fixture
def loop(
    v1_tacker: V1Tacker, host_sim: SimProcess, hosts: Any, v1_serve: ServeProcess, host_vim: str
) -> Iterator[V1Loop]:
    lp = V1Loop(v1_tacker, host_sim, hosts, v1_serve, host_vim)
    try:
        yield lp
    finally:
        for address in list(lp.cut):
            lp.reconnect(address)
        lp.terminate()


def our_entry(shown: dict[str, Any]) -> dict[str, Any]:
    """The instance's ``vimConnectionInfo`` after INSTANTIATE: Tacker's OpenStack entries
    first (its operations use the first), ours appended, as Tacker's v1 driver did."""
    vci = shown["vimConnectionInfo"]
    assert [e["vimType"] for e in vci[:-1]] == ["openstack"] * (len(vci) - 1)
    return dict(vci[-1])


def lccn_status(loop: V1Loop, operation: str) -> dict[str, Any]:
    """The instance's ``metadata.lccn`` once it tells of our job for ``operation``."""

    def reported() -> dict[str, Any] | None:
        text = (loop.v1.show(loop.inst).get("metadata") or {}).get("lccn")
        entry = json.loads(text) if text else None
        return entry if entry and entry["operation"] == operation else None

    return wait_for(reported, timeout=30, interval=0.3, what=f"lccn status of {operation}")  # type: ignore[no-any-return]


def our_echoes(loop: V1Loop, count: int | None = None) -> bool:
    """Every MODIFY_INFO of the instance (``count`` of them) is ours: its PROCESSING and
    COMPLETED are stored as our echo."""
    rows = modify_rows(loop)
    occs = {r[0] for r in rows}
    return (
        (count is None or len(occs) == count)
        and {r[2] for r in rows} == {"echo"}
        and (len(rows) == 2 * len(occs))
    )


def wait_our_echoes(loop: V1Loop, count: int | None = None) -> None:
    """Wait for :func:`our_echoes`; a timeout names the MODIFY_INFO rows serve holds."""
    try:
        wait_for(lambda: our_echoes(loop, count), timeout=30, interval=0.2, what="our echoes")
    except AssertionError as e:
        raise AssertionError(f"{e}: {modify_rows(loop)}") from None


def modify_rows(loop: V1Loop) -> list[tuple[Any, ...]]:
    """serve's MODIFY_INFO events of the instance: (op-occ, state, status)."""
    return [
        tuple(r)
        for r in loop.serve.rows(
            "SELECT vnf_lcm_op_occ_id, operation_state, status FROM events"
            " WHERE vnf_instance_id = ? AND operation = 'MODIFY_INFO' ORDER BY id",
            loop.inst,
        )
    ]


def test_v1_simple_cluster_through_scale_heal_and_terminate(
    v1_vnfd: str, hosts: Any, loop: V1Loop
) -> None:
    shown = loop.instantiate(v1_vnfd, "simple")
    steps = V1Loop.steps(shown)
    assert shown["jobs"][-1]["handler"] == "cluster-instantiate"
    assert steps["discover"]["status"] == "done"
    assert steps["register-vim"]["status"] == "skipped"  # register_vim: false (see above)
    assert steps["write-back"]["status"] == "done", json.dumps(shown["jobs"], indent=1)
    before = loop.check_agreement()
    [master] = [m for m in before.values() if m.role == "master"]
    instance = loop.v1.show(loop.inst)
    entry = our_entry(instance)
    assert entry["vimType"] == "kubernetes"
    assert entry["accessInfo"] == {"authUrl": f"https://{master.address}:6443"}
    assert entry["interfaceInfo"] == {}
    token = hosts.state()["objects"]["Secret/default/default-token-k8svim"]["data"]["token"]
    assert token not in str(instance) and "BEGIN CERTIFICATE" not in str(instance)
    # Our PATCHes, the write-back and then the lccn status entry (JSON text: v1 keeps
    # metadata as strings), made two MODIFY_INFOs whose v1 notifications are our echo.
    assert lccn_status(loop, "INSTANTIATE")["state"] == "done"
    wait_our_echoes(loop, 2)

    # SCALE_OUT by aspect: a ScalingPolicy signal adds a worker; it joins.
    out = loop.scale("SCALE_OUT")
    [added] = loop.affected(out["id"], "ADDED")
    loop.handled(out["id"])
    grown = loop.check_agreement()
    [new] = set(grown) - set(before)
    assert grown[new].vnfc_id == added and grown[new].role == "worker"

    # SCALE_IN by aspect: Heat removes a worker; its node leaves the cluster.
    occ = loop.scale("SCALE_IN")
    [removed] = loop.affected(occ["id"], "REMOVED")
    [gone] = [n for n, m in grown.items() if m.vnfc_id == removed]
    loop.vm_gone(grown[gone].address)
    steps = V1Loop.steps(loop.handled(occ["id"]))
    assert steps["retire-nodes"]["result"]["retired"] == [gone]
    shrunk = loop.check_agreement()
    assert set(shrunk) == set(grown) - {gone}

    # HEAL of a worker: v1 keeps the VNFC's id and shows its new server; the rebuilt VM
    # is told by its server, retired and joined again.
    target = sorted(n for n, m in shrunk.items() if m.role == "worker")[0]
    loop.vm_broken(shrunk[target].address)
    occ = loop.heal_vnfc(shrunk[target].vnfc_id)
    steps = V1Loop.steps(loop.handled(occ["id"]))
    assert steps["retire-nodes"]["result"]["retired"] == [target]
    assert steps["join-workers"]["result"]["joined"] == [target]
    healed = loop.check_agreement()
    assert healed[target].vnfc_id == shrunk[target].vnfc_id

    # HEAL of the whole VNF: Tacker deletes the stack and makes it again, so every VM is
    # new (the addresses come from the pool again: the scaled-in worker's is back); the
    # cluster is built anew on them.
    for address in list(loop.cut):
        loop.reconnect(address)
    testhosts.reset_cluster(hosts)
    occ = loop.op("heal", {})
    steps = V1Loop.steps(loop.handled(occ["id"]))
    new_master = next(m for m in loop.members().values() if m.role == "master")
    assert steps[f"join-master-{new_master.name}"]["status"] == "done"
    loop.check_agreement()
    assert our_entry(loop.v1.show(loop.inst))["vimType"] == "kubernetes"

    # TERMINATE: the inventory is forgotten; Tacker empties vimConnectionInfo itself and
    # nothing is PATCHed to the NOT_INSTANTIATED instance.
    occ = loop.op("terminate", {"terminationType": "FORCEFUL"})
    loop.instantiated = False
    steps = V1Loop.steps(loop.handled(occ["id"]))
    assert steps["forget-inventory"]["status"] == "done"
    assert steps["clear-write-back"]["status"] == "skipped"
    assert loop.inventory() == {}
    after = loop.v1.show(loop.inst)
    assert after["instantiationState"] == "NOT_INSTANTIATED"
    assert "vimConnectionInfo" not in after or after["vimConnectionInfo"] == []
    assert lccn_status(loop, "TERMINATE")["state"] == "done"
    wait_our_echoes(loop)


def test_v1_complex_cluster_heals_a_master(v1_vnfd: str, hosts: Any, loop: V1Loop) -> None:
    loop.instantiate(v1_vnfd, "complex")
    before = loop.check_agreement()  # etcd's members and haproxy's backends: the masters
    masters = sorted(n for n, m in before.items() if m.role == "master")
    assert len(masters) == 3
    entry = our_entry(loop.v1.show(loop.inst))
    assert entry["accessInfo"] == {"authUrl": f"https://{hosts.unused_address}:16443"}

    target = masters[1]
    old_member = next(m for m in hosts.state()["etcd"].values() if m["name"] == target)
    loop.vm_broken(before[target].address)
    occ = loop.heal_vnfc(before[target].vnfc_id)
    steps = V1Loop.steps(loop.handled(occ["id"]))
    assert steps["retire-nodes"]["result"]["retired"] == [target]
    assert steps["retire-nodes"]["result"]["etcdMembers"] == [f"{old_member['ID']:x}"]
    assert steps[f"join-master-{target}"]["status"] == "done"
    loop.check_agreement()
    etcd = hosts.state()["etcd"].values()
    assert sorted(m["name"] for m in etcd) == masters
    assert next(m for m in etcd if m["name"] == target)["ID"] != old_member["ID"]


def cis_nodes(loop: V1Loop) -> dict[str, tuple[str | None, str]]:
    """Each node's ``CIS-node`` label and the compute host Nova shows for its server."""
    members = loop.members()
    masters = sorted((m for m in members.values() if m.role == "master"), key=lambda m: m.name)
    nodes = loop.cluster_nodes(masters)
    host_of = {s["id"]: s["OS-EXT-SRV-ATTR:host"] for s in loop.sim.control.state()["servers"]}
    server_of = {v["id"]: v["computeResource"]["resourceId"] for v in loop.vnfcs()}
    return {
        name: (nodes[name]["metadata"]["labels"].get("CIS-node"), host_of[server_of[m.vnfc_id]])
        for name, m in members.items()
    }


def test_v1_podaffinity_workers_are_labelled_with_their_compute_hosts(
    v1_vnfd: str, hosts: Any, loop: V1Loop
) -> None:
    """Seed 001's hardware-aware pod affinity through v1: the ``podaffinity`` flavour puts
    the workers in an anti-affinity server group, so each runs on another compute host,
    and each worker node is labelled ``CIS-node=<its compute host>`` (Nova's
    ``OS-EXT-SRV-ATTR:host``), a scaled-out one too; masters get no such label."""
    shown = loop.instantiate(v1_vnfd, "podaffinity")
    assert V1Loop.steps(shown)["label-workers"]["status"] == "done"
    members = loop.check_agreement()
    workers = sorted(n for n, m in members.items() if m.role == "worker")
    labels = cis_nodes(loop)
    assert len(workers) == 2
    assert all(labels[w][0] == labels[w][1] for w in workers), labels
    assert len({labels[w][1] for w in workers}) == 2  # anti-affinity: two hosts
    assert {labels[n][0] for n in set(members) - set(workers)} == {None}

    # HEAL of a worker (seed 001: "Heal Worker Node with Pod-affinity"): its new server
    # joins the server group, on a host the other worker does not run on, and its node's
    # label follows it.
    target, other = workers
    loop.vm_broken(members[target].address)
    occ = loop.heal_vnfc(members[target].vnfc_id)
    steps = V1Loop.steps(loop.handled(occ["id"]))
    loop.check_agreement()
    labels = cis_nodes(loop)
    assert steps["label-workers"]["result"]["labels"][target] == {"CIS-node": labels[target][1]}
    assert labels[target][0] == labels[target][1] != labels[other][1]
    [server] = [
        v["computeResource"]["resourceId"]
        for v in loop.vnfcs()
        if v["id"] == members[target].vnfc_id
    ]
    groups = loop.sim.control.state()["server_groups"]
    assert [g["name"] for g in groups if server in g["members"]] == ["workerNode_srvgroup"]
