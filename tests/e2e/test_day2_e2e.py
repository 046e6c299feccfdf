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

import base64
import ipaddress
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.testbed import tacker_bed as tb
from tests.testbed import testhosts
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import CallbackRecorder, TackerClient, wait_for
from tests.testbed.tacker_serve import ServeProcess

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


def secret_token(hosts: Any) -> str:
    """The VIM's bearer token as the stand-in cluster holds it."""
    secret = hosts.state()["objects"]["Secret/default/default-token-k8svim"]
    return base64.b64decode(secret["data"]["token"]).decode()


def failed_joins(hosts: Any, node: str, after: float) -> list[dict[str, Any]]:
    """``kubeadm join`` calls on ``node`` since ``after`` that failed (a second join would)."""
    return [
        c
        for c in hosts.calls()
        if c["tool"] == "kubeadm"
        and c["argv"][:1] == ["join"]
        and c["host"] == node
        and c["rc"] != 0
        and c["t"] >= after
    ]


def step_rows(serve: ServeProcess, occ_id: str) -> dict[str, tuple[Any, ...]]:
    """(status, idempotent, attempts, started_at, finished_at) of each step of the op-occ's
    COMPLETED event's jobs, from the store's steps table (an idempotent step's row is
    written when it finished; one that is not, before it starts)."""
    rows = serve.rows(
        "SELECT s.name, s.status, s.idempotent, s.attempts, s.started_at, s.finished_at"
        " FROM steps s"
        " JOIN jobs j ON s.job_id = j.id JOIN events e ON j.event_id = e.id"
        " WHERE e.vnf_lcm_op_occ_id = ? AND e.operation_state = 'COMPLETED' ORDER BY s.id",
        occ_id,
    )
    return {r[0]: tuple(r[1:]) for r in rows}


def test_scale_out_then_scale_in_converges(bed: tb.BedState, hosts: Any, loop: Loop) -> None:
    assert bed.vnfd_id
    loop.instantiate(bed.vnfd_id, "simple")
    before = loop.check_agreement()
    assert len(workers_of(before)) == 2

    # SCALE_OUT by two steps: Tacker adds two worker VNFCs (listed first); both join in
    # the one join step, every node's /etc/hosts names them.
    t0 = time.time()
    out = loop.scale("SCALE_OUT", steps=2)
    added = loop.affected(out["id"], "ADDED")
    assert len(added) == 2
    workers = [v["id"] for v in loop.vnfcs() if v["vduId"] == "workerNode"]
    assert set(workers[:2]) == set(added)
    shown = loop.handled(out["id"])
    steps = Loop.steps(shown)
    assert shown["jobs"][-1]["handler"] == "cluster-scale"
    assert steps["retire-nodes"]["status"] == "skipped"
    after = loop.check_agreement()
    new = set(after) - set(before)
    assert {after[n].vnfc_id for n in new} == set(added)
    assert all(after[n].role == "worker" for n in new)
    assert sorted(steps["join-workers"]["result"]["joined"]) == sorted(new)
    for name in new:
        assert len(kubeadm_calls(hosts, "join", name, after=t0)) == 1
    # The STARTING event was the parameter check, done before Tacker acted.
    starting = loop.serve.event(loop.event_of(out["id"], "STARTING") or 0)
    assert [j["handler"] for j in starting["jobs"]] == ["cluster-scale-validate"]
    assert starting["status"] == "done"

    # SCALE_IN by one, without the drain hook (no hook configuration: the package's
    # scale_start script does nothing): the no-hook convergence at COMPLETED. Tacker's
    # rule (v2) takes the first worker VNFC in its list.
    assert not bed.hook_config.exists()
    doomed = next(v for v in loop.vnfcs() if v["vduId"] == "workerNode")
    assert doomed["id"] in added
    [gone] = [n for n in new if after[n].vnfc_id == doomed["id"]]
    loop.vm_gone(after[gone].address)  # the VM Tacker is about to delete
    occ = loop.scale("SCALE_IN")
    assert loop.affected(occ["id"], "REMOVED") == [doomed["id"]]
    shown = loop.handled(occ["id"])
    steps = Loop.steps(shown)
    assert steps["retire-nodes"]["result"]["retired"] == [gone]
    assert steps["join-workers"]["status"] == "skipped"
    final = loop.check_agreement()
    assert set(final) == set(after) - {gone}
    for m in final.values():  # no line outside the block names the node that left
        names, _ = loop.etc_hosts(m.address)
        assert gone not in names
    assert gone not in hosts.state()["nodes"]


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
    after = loop.check_agreement()  # etcd members and haproxy backends: the masters
    assert after[target].vnfc_id != before[target].vnfc_id
    # etcd: the old member went, the rebuilt master's new one is there; one per master.
    etcd = hosts.state()["etcd"].values()
    assert sorted(m["name"] for m in etcd) == masters
    assert next(m for m in etcd if m["name"] == target)["ID"] != old_member["ID"]
    [join] = kubeadm_calls(hosts, "join", target, after=t0)
    assert "--control-plane" in join["argv"]
    assert not kubeadm_calls(hosts, "init", target, after=t0)  # never a second cluster


@pytest.mark.parametrize("flavour", ["simple", "complex"])
def test_heal_whole_vnf_rebuilds_the_cluster_and_rewrites_the_vim(
    flavour: str, bed: tb.BedState, tacker: TackerClient, hosts: Any, loop: Loop
) -> None:
    assert bed.vnfd_id
    loop.instantiate(bed.vnfd_id, flavour)
    before = loop.check_agreement()
    old_ca, old_token = hosts.state()["cluster"]["ca_crt"], secret_token(hosts)
    assert tacker.show(loop.inst)["vimConnectionInfo"]["k8s"]["interfaceInfo"]["ssl_ca_cert"] == (
        old_ca
    )

    # Every VM is rebuilt (Tacker deletes the stack and makes it again): so is the cluster.
    testhosts.reset_cluster(hosts)
    occ = loop.op("heal", {"additionalParams": {"all": True}})
    shown = loop.handled(occ["id"])
    steps = Loop.steps(shown)
    # The main master (the one that inits) is the lowest address, as on INSTANTIATE.
    main = min(
        (n for n, m in before.items() if m.role == "master"),
        key=lambda n: ipaddress.ip_address(before[n].address),
    )
    assert steps["retire-nodes"]["status"] == "skipped"  # nothing survives to retire on
    assert steps[f"join-master-{main}"]["result"]["init"] is True
    after = loop.check_agreement()
    assert set(after) == set(before)
    assert not {m.vnfc_id for m in after.values()} & {m.vnfc_id for m in before.values()}

    # A new CA and token, written back: Tacker's entry names the new CA, and the
    # MODIFY_INFO Tacker ran for us carried the new token (GET strips it).
    new_ca, new_token = hosts.state()["cluster"]["ca_crt"], secret_token(hosts)
    assert new_ca != old_ca and new_token != old_token
    entry = tacker.show(loop.inst)["vimConnectionInfo"]["k8s"]
    assert entry["interfaceInfo"]["ssl_ca_cert"] == new_ca
    endpoint = (
        f"https://{hosts.unused_address}:16443"  # the VIP, haproxy's port
        if flavour == "complex"
        else f"https://{after[main].address}:6443"
    )
    assert entry["interfaceInfo"]["endpoint"] == endpoint
    modify = steps["write-back"]["result"]["modifyOpOccId"]
    sent = loop.recorder.wait(vnfLcmOpOccId=modify, operationState="COMPLETED")
    assert sent["changedInfo"]["vimConnectionInfo"]["k8s"]["accessInfo"]["bearer_token"] == (
        new_token
    )
    # Its notifications are our own echo: they run nothing.
    echoes = {
        e["operationState"]: e["status"]
        for e in loop.serve.events()
        if e["vnfLcmOpOccId"] == modify
    }
    assert echoes == {"PROCESSING": "echo", "COMPLETED": "echo"}


@pytest.mark.chaos
def test_kill_9_during_scale_out_resumes_without_joining_twice(
    bed: tb.BedState, hosts: Any, loop: Loop, serve_proc: ServeProcess
) -> None:
    assert bed.vnfd_id
    loop.instantiate(bed.vnfd_id, "simple")
    before = loop.check_agreement()
    hosts.set_join_delay(3.0)  # the join takes a while: the kill lands inside it
    try:
        t0 = time.time()
        out = loop.scale("SCALE_OUT")
        [new] = set(loop.members()) - set(before)
        address = loop.members()[new].address
        wait_for(lambda: loop.joining(address), timeout=120, interval=0.05, what="the join")
        serve_proc.kill()
        at_kill = step_rows(serve_proc, out["id"])
        assert "join-workers" not in at_kill
        assert {"load-params", "discover", "upload-scripts", "configure-hosts"} <= set(at_kill)
        # sshd does not stop a command whose client went away: the join finishes on the
        # node (the node registers) but the install script dies on its next log line.
        wait_for(lambda: new in hosts.state().get("nodes", {}), timeout=30, what="the join")
        registered = hosts.state()["nodes"][new]["created"]
        hosts.set_join_delay(0.0)
        serve_proc.start()
        shown = loop.handled(out["id"])
    finally:
        hosts.set_join_delay(0.0)

    # One job, resumed: what had finished before the kill did not run again ...
    assert len(shown["jobs"]) == 1
    at_end = step_rows(serve_proc, out["id"])
    for name, row in at_kill.items():
        assert at_end[name] == row, (name, row, at_end[name])
    # ... no step that is not idempotent ran twice (attempts count every run) ...
    assert all(row[2] == 1 for row in at_end.values() if not row[1]), at_end
    # ... and the node joined once: the resumed step finished its install without a
    # second kubeadm join (one would fail its preflight, the Node would be new).
    assert at_end["join-workers"][0] == "done"
    assert hosts.state()["nodes"][new]["created"] == registered
    assert not failed_joins(hosts, new, t0)
    after = loop.check_agreement()
    assert set(after) == set(before) | {new}


def test_scale_out_to_an_unreachable_worker_fails_clearly_and_replays(
    bed: tb.BedState, hosts: Any, loop: Loop, serve_proc: ServeProcess
) -> None:
    assert bed.vnfd_id
    loop.instantiate(bed.vnfd_id, "simple")
    before = loop.check_agreement()
    # The simulator gives the new VM the first free host address: that host is down.
    used = {m.address for m in before.values()}
    down = next(h.address for h in hosts.hosts if h.address not in used)
    loop.cut_off(down)
    out = loop.scale("SCALE_OUT")
    failed = loop.handled(out["id"], want="failed")
    job = failed["jobs"][-1]
    name = f"worker{down.rsplit('.', 1)[1]}"
    assert down in job["lastError"] or name in job["lastError"], job["lastError"]
    assert job["errorClass"] == "ssh-connect", job
    assert set(loop.cluster_nodes([m for m in before.values() if m.role == "master"])) == set(
        before
    )  # nobody joined, nothing retired

    # The host is back: the operator replays the event; it converges.
    loop.reconnect(down)
    preview = json.loads(
        serve_proc.cli("replay", str(failed["id"]), "--dry-run", "--format", "json").stdout
    )
    assert preview[0]["handler"] == "cluster-scale", preview
    serve_proc.cli("replay", str(failed["id"]), "--yes")
    shown = loop.handled(out["id"], jobs_after=len(failed["jobs"]))
    replayed = shown["jobs"][-1]
    assert replayed["mode"] == "resume" and replayed["status"] == "done"
    assert Loop.steps(shown)["join-workers"]["result"]["joined"] == [name]
    after = loop.check_agreement()
    assert set(after) == set(before) | {name}


@pytest.mark.chaos
def test_kill_9_during_heal_of_a_master_resumes(
    bed: tb.BedState, hosts: Any, loop: Loop, serve_proc: ServeProcess
) -> None:
    assert bed.vnfd_id
    loop.instantiate(bed.vnfd_id, "complex")
    before = loop.check_agreement()
    masters = sorted(n for n, m in before.items() if m.role == "master")
    target = masters[2]
    old_member = next(m for m in hosts.state()["etcd"].values() if m["name"] == target)
    loop.vm_broken(before[target].address)
    hosts.set_join_delay(3.0)
    try:
        t0 = time.time()
        occ = loop.heal_vnfc(before[target].vnfc_id)
        address = before[target].address
        wait_for(lambda: loop.joining(address), timeout=120, interval=0.05, what="the join")
        serve_proc.kill()
        at_kill = step_rows(serve_proc, occ["id"])
        assert f"join-master-{target}" not in at_kill
        assert at_kill["retire-nodes"][0] == "done"  # the old etcd member is gone

        def rejoined() -> bool:
            etcd = hosts.state().get("etcd", {}).values()
            return any(m["name"] == target and m["ID"] != old_member["ID"] for m in etcd)

        wait_for(rejoined, timeout=30, what="the cut-off join to finish on the node")
        registered = hosts.state()["nodes"][target]["created"]
        hosts.set_join_delay(0.0)
        serve_proc.start()
        shown = loop.handled(occ["id"])
    finally:
        hosts.set_join_delay(0.0)

    assert len(shown["jobs"]) == 1
    at_end = step_rows(serve_proc, occ["id"])
    for name, row in at_kill.items():  # retire-nodes (etcd member removal) ran once
        assert at_end[name] == row, (name, row, at_end[name])
    assert all(row[2] == 1 for row in at_end.values() if not row[1]), at_end
    assert at_end[f"join-master-{target}"][0] == "done"
    assert hosts.state()["nodes"][target]["created"] == registered
    assert not failed_joins(hosts, target, t0)
    after = loop.check_agreement()
    assert after[target].vnfc_id != before[target].vnfc_id
    assert sorted(m["name"] for m in hosts.state()["etcd"].values()) == masters


def test_heal_of_the_single_master_is_refused_clearly(
    bed: tb.BedState, hosts: Any, loop: Loop
) -> None:
    """Tacker's driver refuses it too ("please respawn"): the cluster's state went with
    the master; the whole VNF must be healed."""
    assert bed.vnfd_id
    loop.instantiate(bed.vnfd_id, "simple")
    before = loop.check_agreement()
    [master] = [m for m in before.values() if m.role == "master"]
    t0 = time.time()
    loop.vm_broken(master.address)
    occ = loop.heal_vnfc(master.vnfc_id)
    shown = loop.handled(occ["id"], want="failed")
    job = shown["jobs"][-1]
    assert job["errorClass"] == "permanent" and "heal the whole VNF" in job["lastError"], job
    assert Loop.steps(shown)["retire-nodes"]["status"] == "failed"
    assert not kubeadm_calls(hosts, "init", master.name, after=t0)  # no second cluster
    assert set(hosts.state()["nodes"]) == set(before)  # nothing deleted either
