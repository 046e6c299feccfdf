"""Issue 13 end to end: SCALE and HEAL of the cluster, driven by the real Tacker 16.0.0.

Tacker scales and heals the sample package's VNF on the simulated OpenStack, whose VNFC
ports carry the sshd test hosts' addresses; ``lccn-subscriber serve`` runs as a
subprocess (``serve_proc``: real Tacker client, noauth, its own subscription, SQLite
store) and its day-2 handlers bring the stand-in cluster on the hosts along. After each
operation :meth:`Loop.check_agreement` holds Tacker's VNFCs, ``kubectl get nodes`` on a
master, every node's /etc/hosts and our inventory against each other.

No drain hook in the package here (SCALE_IN is the no-hook convergence path at
COMPLETED): Tacker v2 removes the aspect's VNFCs first in ``vnfcResourceInfo`` order,
newest first. A VM Tacker deletes is wiped and cut off the network; a VM it rebuilds
(HEAL: new VNFC id, same port and address) is wiped before the heal, as the VM that
broke and made the operator heal it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.openstack_sim.process import SimProcess
from tests.tacker.helpers import CallbackRecorder, ServeProcess, TackerClient
from tests.testbed import tacker_bed as tb

from .day2 import Loop, kubeadm_calls

pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("fresh_cluster")]

ZONE = "topology.kubernetes.io/zone"


@pytest.fixture
def loop(
    tacker: TackerClient,
    host_sim: SimProcess,
    hosts: Any,
    serve_proc: ServeProcess,
    recorder: CallbackRecorder,
) -> Iterator[Loop]:
    """The loop; at teardown every host back on the network and the instance gone."""
    lp = Loop(tacker, host_sim, hosts, serve_proc, recorder)
    try:
        yield lp
    finally:
        for address in list(lp.cut):
            lp.reconnect(address)
        if serve_proc.proc is None or serve_proc.proc.poll() is not None:
            serve_proc.start()  # a chaos test that failed between kill and restart
        lp.terminate()


def workers_of(members: dict[str, Any]) -> set[str]:
    return {n for n, m in members.items() if m.role == "worker"}


def test_scale_out_then_scale_in_converges(bed: tb.BedState, hosts: Any, loop: Loop) -> None:
    assert bed.vnfd_id
    loop.instantiate(bed.vnfd_id, "simple")
    before = loop.check_agreement()
    assert len(workers_of(before)) == 2

    # SCALE_OUT: Tacker adds one worker VNFC (listed first); it joins, the others learn it.
    t0 = time.time()
    out = loop.scale("SCALE_OUT")
    [added] = loop.affected(out["id"], "ADDED")
    assert next(v["id"] for v in loop.vnfcs() if v["vduId"] == "workerNode") == added
    shown = loop.handled(out["id"])
    steps = Loop.steps(shown)
    assert shown["jobs"][-1]["handler"] == "cluster-scale"
    assert steps["retire-nodes"]["status"] == "skipped"
    assert steps["join-workers"]["status"] == "done"
    after = loop.check_agreement()
    [new] = set(after) - set(before)
    assert after[new].vnfc_id == added and after[new].role == "worker"
    assert steps["join-workers"]["result"]["joined"] == [new]
    assert len(kubeadm_calls(hosts, "join", new, after=t0)) == 1

    # SCALE_IN: Tacker's rule (v2) takes the first worker VNFC in its list: the newest.
    doomed = next(v for v in loop.vnfcs() if v["vduId"] == "workerNode")
    assert doomed["id"] == added
    loop.vm_gone(after[new].address)  # the VM Tacker is about to delete
    occ = loop.scale("SCALE_IN")
    assert loop.affected(occ["id"], "REMOVED") == [added]
    shown = loop.handled(occ["id"])
    steps = Loop.steps(shown)
    assert steps["retire-nodes"]["result"]["retired"] == [new]
    assert steps["join-workers"]["status"] == "skipped"
    final = loop.check_agreement()
    assert final == before
    for m in final.values():  # no line outside the block names the node that left
        names, _ = loop.etc_hosts(m.address)
        assert new not in names


def test_heal_worker_rejoins_with_its_labels(bed: tb.BedState, hosts: Any, loop: Loop) -> None:
    assert bed.vnfd_id
    loop.instantiate(bed.vnfd_id, "simple", label_zone=True)
    before = loop.check_agreement()
    target = sorted(workers_of(before))[0]
    other = sorted(workers_of(before))[1]
    old = hosts.state()["nodes"][target]
    assert old["labels"].get(ZONE) == loop.sim.config.zone

    # The worker's VM broke: the operator heals its VNFC; Tacker rebuilds the server on
    # the same port (same address, so the same node name) under a new VNFC id.
    t0 = time.time()
    loop.vm_broken(before[target].address)
    occ = loop.heal_vnfc(before[target].vnfc_id)
    assert loop.affected(occ["id"], "REMOVED") == [before[target].vnfc_id]
    shown = loop.handled(occ["id"])
    steps = Loop.steps(shown)
    assert shown["jobs"][-1]["handler"] == "cluster-heal"
    assert steps["retire-nodes"]["result"]["retired"] == [target]
    assert steps["join-workers"]["result"]["joined"] == [target]
    assert steps["write-back"]["status"] == "skipped"  # same cluster, same CA and endpoint
    after = loop.check_agreement()
    assert set(after) == set(before)
    assert after[target].vnfc_id != before[target].vnfc_id
    assert after[target].address == before[target].address
    assert after[other] == before[other]
    # The old Node object was deleted before the rebuilt VM joined: a new object ...
    new = hosts.state()["nodes"][target]
    assert new["created"] > old["created"]
    assert len(kubeadm_calls(hosts, "join", target, after=t0)) == 1
    assert not kubeadm_calls(hosts, "join", other, after=t0)  # the healthy one untouched
    # ... with its labels back.
    assert new["labels"].get(ZONE) == old["labels"][ZONE]


def test_heal_master_of_the_ha_cluster_replaces_its_etcd_member(
    bed: tb.BedState, hosts: Any, loop: Loop
) -> None:
    assert bed.vnfd_id
    loop.instantiate(bed.vnfd_id, "complex")
    before = loop.check_agreement()
    masters = sorted(n for n, m in before.items() if m.role == "master")
    assert len(masters) == 3
    target = masters[1]
    old_member = next(m for m in hosts.state()["etcd"].values() if m["name"] == target)

    t0 = time.time()
    loop.vm_broken(before[target].address)
    occ = loop.heal_vnfc(before[target].vnfc_id)
    shown = loop.handled(occ["id"])
    steps = Loop.steps(shown)
    retired = steps["retire-nodes"]["result"]
    assert retired["retired"] == [target]
    assert retired["etcdMembers"] == [f"{old_member['ID']:x}"]
    assert steps[f"join-master-{target}"]["status"] == "done"
    after = loop.check_agreement()
    assert after[target].vnfc_id != before[target].vnfc_id
    # etcd: the old member went, the rebuilt master's new one is there; one per master.
    etcd = hosts.state()["etcd"].values()
    assert sorted(m["name"] for m in etcd) == masters
    assert next(m for m in etcd if m["name"] == target)["ID"] != old_member["ID"]
    [join] = kubeadm_calls(hosts, "join", target, after=t0)
    assert "--control-plane" in join["argv"]
    assert not kubeadm_calls(hosts, "init", target, after=t0)  # never a second cluster
    # Every master's haproxy sends to every master again.
    for name in masters:
        assert loop.haproxy_backends(after[name].address) == {
            m: after[m].address for m in masters
        }, name
