"""The full loop in the complex (HA) flavour, on the real control plane.

The real Tacker INSTANTIATEs the cluster package's complex flavour (three masters behind
the VIP, two workers) on the simulated OpenStack whose ports are the ``k8s`` hosts;
``serve`` (a subprocess) builds it over SSH: Debian's haproxy (TCP, ``:16443`` to every
master's API server) and keepalived (VRRP between the masters' network namespaces)
run on each master, ``kubeadm init --control-plane-endpoint VIP:16443
--upload-certs`` on the main one, and the real ``kubeadm join --control-plane`` with a
fresh certificate key on the others, each adding its stacked etcd member. Tacker's own
Kubernetes client lists every node Ready through the ``vimConnectionInfo`` written back
(the VIP), also after the VIP moved to another master.

Then HEAL of a master through Tacker: its VM is wiped (its etcd, API server and haproxy
stop), serve removes its real etcd member by id and its haproxy backend from the other
masters (reloaded for real), the rebuilt master joins the control plane again with a new
member and its backend is restored. :class:`tests.e2e.day2.Loop` checks that Tacker's
VNFCs, the cluster's Nodes, /etc/hosts, etcd's members, every haproxy's backends and
serve's inventory agree.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time

import pytest

from tests.e2e.day2 import Loop, Member
from tests.k8s.full_loop import K8S_VIM_TYPE, ClusterVnf, cluster_fixture, octet, tacker_k8s
from tests.testbed import tacker_bed, testhosts
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import CallbackRecorder, TackerClient, wait_for
from tests.testbed.tacker_serve import VIM_KEY, ServeProcess
from tests.testbed.testhosts import TestBed

pytestmark = [pytest.mark.k8s, pytest.mark.tacker, pytest.mark.ssh, pytest.mark.timeout(1200)]

HA_PORT = 16443


# VNF-A, complex flavour: three masters and two workers, built by serve.
ha_vnf = cluster_fixture("ha_vnf", "complex")


@pytest.fixture
def loop(
    ha_vnf: ClusterVnf,
    tacker: TackerClient,
    k8s_sim: SimProcess,
    loop_hosts: TestBed,
    serve: ServeProcess,
    recorder: CallbackRecorder,
) -> Loop:
    """The day-2 loop's views of VNF-A (the module's fixture terminates it)."""
    lp = Loop(tacker, k8s_sim, loop_hosts, serve, recorder)
    lp.inst, lp.instantiated = ha_vnf.inst, True
    return lp


def vip_holders(loop: Loop, masters: list[testhosts.TestHost], vip: str) -> list[str]:
    """The masters whose eth0 carries the VIP now (keepalived adds and removes it)."""
    return [
        m.address
        for m in masters
        if f" {vip}/" in loop.ssh(m.address, "ip -o -4 addr show dev eth0")
    ]


def every_node_ready(vnf: ClusterVnf) -> dict[str, bool]:
    """Tacker's client, through the written-back VIM, finds every node Ready."""
    expected = {
        *(f"master{octet(m.address)}" for m in vnf.masters),
        *(f"worker{octet(w.address)}" for w in vnf.workers),
    }
    seen = tacker_k8s(vnf.stored)
    assert seen.get("verify_ssl") is True, seen
    assert seen.get("nodes") == dict.fromkeys(expected, True), seen
    return seen["nodes"]  # type: ignore[no-any-return]


def test_full_loop_ha_three_masters_behind_the_vip_and_its_vim_lists_every_node_ready(
    ha_vnf: ClusterVnf, loop: Loop, loop_hosts: TestBed
) -> None:
    vnf = ha_vnf
    vip = loop_hosts.unused_address
    endpoint = f"https://{vip}:{HA_PORT}"
    ca = (loop_hosts.private_dir(vnf.master, "/etc/kubernetes") / "pki" / "ca.crt").read_text()

    # The entry points at the VIP's haproxy port, with the cluster's CA; its token is real.
    entry = vnf.shown["vimConnectionInfo"][VIM_KEY]
    assert entry["vimType"] == K8S_VIM_TYPE
    assert entry["interfaceInfo"] == {"endpoint": endpoint, "ssl_ca_cert": ca}
    assert "bearer_token" not in json.dumps(entry)
    assert vnf.stored["interfaceInfo"] == entry["interfaceInfo"]
    token = vnf.stored["accessInfo"]["bearer_token"]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sub"] == "system:serviceaccount:default:default"
    every_node_ready(vnf)

    # Tacker's VNFCs, the Nodes, /etc/hosts, the inventory, etcd's three members (real
    # etcdctl) and each master's haproxy backends (all three masters) agree.
    members = loop.check_agreement()
    assert sorted(m.name for m in members.values() if m.role == "master") == sorted(
        f"master{octet(m.address)}" for m in vnf.masters
    )
    for master in vnf.masters:
        # haproxy and keepalived run on every master (the install script started them).
        assert loop.ssh(master.address, "systemctl is-active haproxy keepalived").split() == [
            "active",
            "active",
        ]
        assert "keepalived" in testhosts.kubernetes_processes(master)
    # The main master (VRRP priority 103) holds the VIP, alone.
    assert vip_holders(loop, vnf.masters, vip) == [vnf.master.address]

    # keepalived stops on the main master: the VIP moves to the next one (priority 102)
    # within seconds, and the cluster stays reachable through the same entry.
    loop.ssh(vnf.master.address, "systemctl stop keepalived")
    try:
        moved = wait_for(
            lambda: vip_holders(loop, vnf.masters, vip) == [vnf.masters[1].address],
            timeout=30,
            interval=0.5,
            what=f"the VIP on {vnf.masters[1].name}",
        )
        assert moved
        every_node_ready(vnf)
    finally:
        loop.ssh(vnf.master.address, "systemctl start keepalived")
    # ... and comes back to the main master (preemption).
    wait_for(
        lambda: vip_holders(loop, vnf.masters, vip) == [vnf.master.address],
        timeout=30,
        interval=0.5,
        what="the VIP back on the main master",
    )
    print(", ".join(f"{k} {v:.1f} s" for k, v in vnf.timings.items()))


def test_heal_of_a_master_replaces_its_real_etcd_member_and_haproxy_backend(
    ha_vnf: ClusterVnf, loop: Loop, bed: tacker_bed.BedState
) -> None:
    before = loop.check_agreement()
    masters = sorted((m for m in before.values() if m.role == "master"), key=lambda m: m.name)
    assert len(masters) == 3
    target: Member = masters[1]  # not the main master, which holds the VIP
    survivors = [m for m in masters if m.name != target.name]
    old_ids = {name: member for member, name in loop.etcd_members(masters).items()}
    old_id = old_ids[target.name]

    # The VM broke: its static pods (etcd, API server ...), haproxy and keepalived stop,
    # its disk is gone. Tacker rebuilds it (same port and address, new VNFC).
    t0 = time.monotonic()
    loop.vm_broken(target.address)
    occ = loop.heal_vnfc(target.vnfc_id)
    shown = loop.handled(occ["id"], timeout=600)
    took = time.monotonic() - t0
    steps = Loop.steps(shown)
    retired = steps["retire-nodes"]["result"]
    assert retired["retired"] == [target.name]
    assert retired["etcdMembers"] == [old_id]  # removed by its id, through a survivor
    assert sorted(retired["haproxy"]) == sorted(f"{m.name}-{target.name}" for m in survivors)
    assert steps[f"join-master-{target.name}"]["status"] == "done"
    assert steps[f"join-master-{target.name}"]["result"]["joined"] is True
    # The survivors' haproxy sends to the rebuilt master again (the rebuilt one's own
    # configuration, written by the install script, already lists every master).
    assert sorted(steps["haproxy-backends"]["result"]["changed"]) == sorted(
        f"{m.name}+{target.name}" for m in survivors
    )

    # Everything agrees again: three etcd members, the rebuilt master's a new one.
    after = loop.check_agreement()
    assert after[target.name].vnfc_id != target.vnfc_id
    now = {name: member for member, name in loop.etcd_members(masters).items()}
    assert sorted(now) == [m.name for m in masters]
    assert now[target.name] != old_id
    assert {n: now[n] for n in now if n != target.name} == {
        n: old_ids[n] for n in old_ids if n != target.name
    }
    assert loop.ssh(target.address, "systemctl is-active haproxy keepalived").split() == [
        "active",
        "active",
    ]
    # The API, through the VIP and the entry Tacker now stores, still lists every node Ready.
    stored = (tacker_bed.stored_vim_connection_info(bed, ha_vnf.inst) or {}).get(VIM_KEY, {})
    assert stored.get("interfaceInfo") == ha_vnf.stored["interfaceInfo"]
    every_node_ready(dataclasses.replace(ha_vnf, stored=stored))
    print(f"HEAL of {target.name}: {took:.1f} s from the broken VM to serve's job done")
