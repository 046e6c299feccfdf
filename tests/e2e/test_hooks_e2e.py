"""Tacker's hooks, the full loop: the real Tacker runs the package's ``lccn_hook.py`` at
every point of each operation, the script asks ``serve`` (a subprocess, hooks on) to run
the operation's cluster job on the test hosts and waits for it, so Tacker's answer tells
the truth: an op-occ is COMPLETED only once the cluster is (the k8s vimConnectionInfo
entry already in the instance, no MODIFY_INFO), FAILED_TEMP with our reason when its job
failed; ``retry`` resumes the job, ``rollback`` resets the nodes, and a ``serve`` killed
while Tacker waits answers once it is back, running nothing twice. Without the hooks,
today's path stays: the instance's ``metadata.lccn`` says how our job went, and a
COMPLETED sent while ``serve`` was down is found by the reconciler.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster_fakes import host_params
from tests.testbed import tacker_bed as tb
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import (
    NETWORK_ID,
    CallbackRecorder,
    TackerClient,
    instantiate_request,
    unique_name,
    wait_for,
)
from tests.testbed.tacker_serve import ServeProcess

from .conftest import give_up, reachable, running_loop, serve_config, unreachable
from .day2 import ADMIN_CONF, Loop, kubeadm_calls

pytestmark = [pytest.mark.timeout(900), pytest.mark.usefixtures("fresh_cluster")]

K8S = "ETSINFV.KUBERNETES.V_1"


def at(stamp: str) -> float:
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


def joining(loop: Loop, hosts: Any) -> Any:
    """The test host on which a ``kubeadm join`` runs now, if any."""
    return next((h for h in hosts.hosts if loop.joining(h.address)), None)


def start_instantiate(loop: Loop, vnfd_id: str) -> str:
    """Create and start INSTANTIATE (the loop's own parameters); the op-occ id."""
    loop.inst = loop.tacker.create(vnfd_id, unique_name("hooks"))
    params = host_params(loop.hosts)
    occ = loop.tacker.start_op(
        loop.inst,
        "instantiate",
        instantiate_request(loop.sim.vim_connection_info(), params, NETWORK_ID),
    )
    loop.instantiated = True  # teardown terminates it, whatever becomes of it
    return occ


def lcm(loop: Loop, occ: str, action: str, timeout: float = 240) -> dict[str, Any]:
    """``retry`` or ``rollback`` of a FAILED_TEMP op-occ through Tacker's API; the op-occ
    once that pass of it has settled."""
    before = loop.tacker.op_occ(occ)["stateEnteredTime"]
    status, _, body = loop.tacker.call("POST", f"/vnflcm/v2/vnf_lcm_op_occs/{occ}/{action}")
    assert status == 202, body

    def over() -> dict[str, Any] | None:
        now = loop.tacker.op_occ(occ)
        if now["operationState"] in ("COMPLETED", "ROLLED_BACK", "FAILED"):
            return now
        if now["operationState"] == "FAILED_TEMP" and now["stateEnteredTime"] != before:
            return now
        return None

    return wait_for(over, timeout=timeout, interval=0.2, what=f"{action} of {occ}")  # type: ignore[no-any-return]


def settled(loop: Loop, occ: str, timeout: float = 240) -> dict[str, Any]:
    return loop.tacker.wait_op(occ, timeout=timeout)


def job_steps(loop: Loop, occ: str, state: str = "COMPLETED") -> list[dict[str, Any]]:
    """Every job of the op-occ's ``state`` event, oldest first, as ``events show`` says."""
    event = loop.event_of(occ, state)
    assert event is not None
    return list(loop.serve.event(event)["jobs"])


def modify_infos(loop: Loop) -> list[dict[str, Any]]:
    return [
        o
        for o in loop.tacker.op_occs()
        if o["vnfInstanceId"] == loop.inst and o["operation"] == "MODIFY_INFO"
    ]


def cluster_token(loop: Loop, master: str) -> str:
    out = loop.ssh(
        master,
        f"kubectl --kubeconfig {ADMIN_CONF} get secret default-token-k8svim -n default "
        "-o jsonpath='{.data.token}'",
    )
    return base64.b64decode(out.strip()).decode()


def test_every_operation_is_completed_only_with_its_cluster_work(
    bed: tb.BedState, hosts: Any, host_sim: SimProcess, hooked_loop: Loop
) -> None:
    loop = hooked_loop
    assert bed.vnfd_id
    t0 = time.monotonic()
    occ = start_instantiate(loop, bed.vnfd_id)
    done = settled(loop, occ)
    took = time.monotonic() - t0
    assert done["operationState"] == "COMPLETED", done.get("error")

    # COMPLETED: the cluster is built and Tacker's instance already holds our entry, after
    # its own (later operations use the first), with the cluster's token; no MODIFY_INFO.
    members = loop.check_agreement()
    shown = loop.tacker.show(loop.inst)["vimConnectionInfo"]
    assert list(shown) == ["vim1", "k8s"] and shown["k8s"]["vimType"] == K8S
    stored = tb.stored_vim_connection_info(bed, loop.inst) or {}
    [master] = [m for m in members.values() if m.role == "master"]
    assert stored["k8s"]["interfaceInfo"]["endpoint"] == f"https://{master.address}:6443"
    assert stored["k8s"]["accessInfo"]["bearer_token"] == cluster_token(loop, master.address)
    assert modify_infos(loop) == []
    [job] = job_steps(loop, occ)
    steps = {s["name"]: s for s in job["steps"]}
    assert steps["confirm"]["result"]["hook"] == "instantiate_end"
    assert steps["write-back"]["result"]["handedBack"] is True
    # Tacker's own COMPLETED was the same transition: one event, its job run once.
    assert loop.serve.rows(
        "SELECT source, status FROM events WHERE vnf_lcm_op_occ_id = ? AND "
        "operation_state = 'COMPLETED'",
        occ,
    ) == [("hook", "done")]
    print(f"INSTANTIATE 202 -> COMPLETED with hooks: {took:.1f} s")

    # SCALE_OUT: COMPLETED once the new worker is Ready (the check right away).
    out = loop.scale("SCALE_OUT")
    after = loop.check_agreement()
    assert len(after) == len(members) + 1
    assert Loop.steps(loop.handled(out["id"]))["confirm"]["result"]["hook"] == "scale_end"

    # SCALE_IN: the leaving worker drained while its VM ran, before Tacker touched Heat.
    doomed = next(v for v in loop.vnfcs() if v["vduId"] == "workerNode")  # Tacker's v2 rule
    [gone] = [n for n, m in after.items() if m.vnfc_id == doomed["id"]]
    host_sim.control.clear_calls()
    occ_in = loop.scale("SCALE_IN")
    processing = loop.serve.event(loop.event_of(occ_in["id"], "PROCESSING") or 0)
    drain = Loop.steps(processing)["drain-leaving"]
    assert drain["result"]["drained"] == [gone]
    heat_writes = [
        at(c["at"])
        for c in host_sim.control.calls()
        if c["service"] == "orchestration" and c["method"] in ("PATCH", "PUT", "DELETE")
    ]
    assert heat_writes and drain["finishedAt"] < min(heat_writes), (drain, heat_writes)
    loop.vm_gone(after[gone].address)
    final = loop.check_agreement()
    assert set(final) == set(after) - {gone}

    # HEAL of a broken worker: COMPLETED once it joined again.
    target = sorted(n for n, m in final.items() if m.role == "worker")[0]
    loop.vm_broken(final[target].address)
    loop.heal_vnfc(final[target].vnfc_id)
    healed = loop.check_agreement()
    assert healed[target].vnfc_id != final[target].vnfc_id
    assert modify_infos(loop) == []  # the same cluster: nothing to hand back

    # TERMINATE: the cluster is forgotten before Tacker deletes the VMs.
    term = loop.tacker.run_op(loop.inst, "terminate", {"terminationType": "FORCEFUL"})
    assert term["operationState"] == "COMPLETED"
    loop.instantiated = False
    assert loop.inventory() == {}


def test_a_failed_join_fails_the_op_occ_rollback_resets_the_nodes_and_retry_resumes(
    bed: tb.BedState, hosts: Any, hooked_loop: Loop
) -> None:
    loop = hooked_loop
    assert bed.vnfd_id
    hosts.set_join_delay(2.0)  # the join takes a while: the worker breaks off inside it

    def fail_in_join() -> tuple[str, Any]:
        occ = start_instantiate(loop, bed.vnfd_id or "")
        worker = wait_for(
            lambda: joining(loop, hosts), timeout=120, interval=0.05, what="a worker's join"
        )
        unreachable(worker)
        failed = settled(loop, occ)
        assert failed["operationState"] == "FAILED_TEMP", failed
        return occ, worker

    # A worker breaks off in its join: the op-occ is FAILED_TEMP with our reason.
    occ, worker = fail_in_join()
    error = loop.tacker.op_occ(occ)["error"]
    name = f"worker{worker.address.rsplit('.', 1)[1]}"
    assert error["detail"].startswith("instantiate_end failed: b'lccn-subscriber: join-workers: ")
    assert name in error["detail"] or worker.address in error["detail"], error
    assert "\\n" not in error["detail"] and (hosts.password or "\0") not in json.dumps(error)

    # rollback: the nodes are reset before Tacker deletes the VMs, the cluster forgotten.
    nodes = set(loop.inventory())
    assert len(nodes) == 3
    reachable(worker)
    t_rollback = time.time()
    assert lcm(loop, occ, "rollback")["operationState"] == "ROLLED_BACK"
    [rollback] = job_steps(loop, occ, "ROLLING_BACK")
    reset = {s["name"]: s for s in rollback["steps"]}["reset-nodes"]["result"]
    assert set(reset["reset"]) == nodes and reset["unreachable"] == []
    for node in nodes:
        assert kubeadm_calls(hosts, "reset", node, after=t_rollback), node
    assert loop.inventory() == {}
    assert loop.tacker.show(loop.inst)["instantiationState"] == "NOT_INSTANTIATED"
    loop.tacker.delete(loop.inst)
    loop.instantiated = False

    # A new instance on the same hosts builds; it fails the same way, and a retry resumes.
    occ, worker = fail_in_join()
    [first] = job_steps(loop, occ)
    done_first = {s["name"]: s for s in first["steps"] if s["status"] in ("done", "skipped")}
    reachable(worker)
    hosts.set_join_delay(0.0)
    done = lcm(loop, occ, "retry")
    assert done["operationState"] == "COMPLETED", done.get("error")
    loop.check_agreement()
    _, resumed = job_steps(loop, occ)
    assert resumed["mode"] == "resume" and resumed["status"] == "done"
    again = {s["name"]: s for s in resumed["steps"]}
    for name_, step in done_first.items():  # the steps done before are not run again
        assert again[name_]["startedAt"] == step["startedAt"], name_
        assert again[name_]["finishedAt"] == step["finishedAt"], name_
    assert any(n.startswith("init-master-") for n in done_first)
    assert again["write-back"]["result"]["handedBack"] is True
    assert modify_infos(loop) == []


@pytest.mark.chaos
def test_serve_killed_while_tacker_waits_answers_once_back_and_runs_nothing_twice(
    bed: tb.BedState, hosts: Any, hooked_loop: Loop
) -> None:
    loop = hooked_loop
    assert bed.vnfd_id
    hosts.set_join_delay(3.0)  # the kill lands inside a join
    t0 = time.time()
    occ = start_instantiate(loop, bed.vnfd_id)
    worker = wait_for(lambda: joining(loop, hosts), timeout=120, interval=0.05, what="a join")
    loop.serve.kill()
    at_kill = {r[0]: r[1:] for r in step_rows(loop, occ)}
    assert "join-workers" not in at_kill and any(n.startswith("init-master-") for n in at_kill)
    # sshd does not stop a command whose client went away: the join finishes on the node.
    name = f"worker{worker.address.rsplit('.', 1)[1]}"
    wait_for(lambda: name in hosts.state().get("nodes", {}), timeout=30, what="the join")
    registered = hosts.state()["nodes"][name]["created"]
    hosts.set_join_delay(0.0)
    assert loop.tacker.op_occ(occ)["operationState"] == "PROCESSING"  # Tacker still waits
    loop.serve.start()
    done = settled(loop, occ)
    assert done["operationState"] == "COMPLETED", done.get("error")
    members = loop.check_agreement()
    assert (tb.stored_vim_connection_info(bed, loop.inst) or {}).get("k8s")
    # One job, resumed: what had finished before the kill did not run again ...
    [job] = job_steps(loop, occ)
    assert job["status"] == "done"
    at_end = {r[0]: r[1:] for r in step_rows(loop, occ)}
    for step, row in at_kill.items():
        assert at_end[step] == row, (step, row, at_end[step])
    # ... the cluster was made once, and the interrupted join not run again (a second
    # one would fail its preflight, and the Node would be new).
    [master] = [m for m in members.values() if m.role == "master"]
    assert len(kubeadm_calls(hosts, "init", master.name, after=t0)) == 1
    assert hosts.state()["nodes"][name]["created"] == registered
    assert not [
        c
        for c in hosts.calls()
        if c["tool"] == "kubeadm"
        and c["argv"][:1] == ["join"]
        and c["rc"] != 0
        and float(c["t"]) >= t0
    ]


def step_rows(loop: Loop, occ: str) -> list[tuple[Any, ...]]:
    """(name, status, attempts, started_at, finished_at) of the op-occ's COMPLETED steps."""
    return loop.serve.rows(
        "SELECT s.name, s.status, s.attempts, s.started_at, s.finished_at FROM steps s"
        " JOIN jobs j ON s.job_id = j.id JOIN events e ON j.event_id = e.id"
        " WHERE e.vnf_lcm_op_occ_id = ? AND e.operation_state = 'COMPLETED' ORDER BY s.id",
        occ,
    )


# -- without the hooks: today's path, its outcome written to the instance ------------------

RECONCILE = 2.0  # this test's reconcile interval (the default is 60 s)


@pytest.fixture
def plain_loop(
    bed: tb.BedState,
    tacker: TackerClient,
    host_sim: SimProcess,
    hosts: Any,
    recorder: CallbackRecorder,
    tmp_path: Path,
) -> Iterator[Loop]:
    """serve without hooks (Tacker's conductor has no hook configuration), reconciling every
    :data:`RECONCILE` s."""
    config = serve_config(bed, host_sim, hosts)
    config["tacker"] = {**config["tacker"], "reconcile_interval": RECONCILE}
    proc = ServeProcess(tmp_path, config=config)
    proc.start()
    with running_loop(Loop(tacker, host_sim, hosts, proc, recorder)) as loop:
        yield loop


def lccn_status(loop: Loop, state: str, op_occ: str) -> dict[str, Any]:
    """The instance's ``metadata.lccn`` once it says ``state`` for ``op_occ``."""

    def written() -> dict[str, Any] | None:
        entry = (loop.tacker.show(loop.inst).get("metadata") or {}).get("lccn") or {}
        return entry if (entry.get("state"), entry.get("opOccId")) == (state, op_occ) else None

    return wait_for(written, timeout=120, interval=0.2, what=f"lccn {state} of {op_occ}")  # type: ignore[no-any-return]


def test_without_hooks_the_instance_tells_how_the_job_went_and_a_missed_completed_is_acted_on(
    bed: tb.BedState, hosts: Any, plain_loop: Loop
) -> None:
    loop = plain_loop
    assert bed.vnfd_id
    # Today's path: COMPLETED first, then our job, then the MODIFY_INFO of its write-back.
    t0 = time.monotonic()
    occ = start_instantiate(loop, bed.vnfd_id)
    assert settled(loop, occ)["operationState"] == "COMPLETED"
    completed = time.monotonic() - t0
    modify = Loop.steps(loop.handled(occ))["write-back"]["result"]["modifyOpOccId"]
    assert loop.tacker.wait_op(modify)["operationState"] == "COMPLETED"
    took = time.monotonic() - t0
    done = lccn_status(loop, "done", occ)
    assert done["operation"] == "INSTANTIATE" and "reason" not in done  # merge patch: null
    before = loop.check_agreement()
    print(
        f"INSTANTIATE 202 -> COMPLETED without hooks: {completed:.1f} s (cluster not built yet); "
        f"-> job done and MODIFY_INFO COMPLETED: {took:.1f} s"
    )

    # A job that fails: the op-occ says COMPLETED, the instance says why our job failed.
    used = {m.address for m in before.values()}
    down = next(h for h in hosts.hosts if h.address not in used)
    unreachable(down)
    out = loop.scale("SCALE_OUT")
    assert out["operationState"] == "COMPLETED"
    failed = lccn_status(loop, "failed", out["id"])
    assert failed["operation"] == "SCALE" and down.address in failed["reason"], failed
    assert (hosts.password or "\0") not in json.dumps(failed)
    reachable(down)
    give_up(loop)

    # serve is down while Tacker runs a whole INSTANTIATE: no notification reaches it, yet
    # the reconciler finds the COMPLETED once serve is back, and the cluster is built.
    loop.serve.stop()
    occ = start_instantiate(loop, bed.vnfd_id)
    assert settled(loop, occ)["operationState"] == "COMPLETED"
    loop.serve.start()
    back = time.monotonic()
    event = wait_for(lambda: loop.event_of(occ), timeout=60, interval=0.1, what="reconciled")
    lag = time.monotonic() - back
    assert lag < RECONCILE + 10, lag  # its first pass runs at start: well within
    assert loop.serve.rows("SELECT source FROM events WHERE id = ?", event) == [("reconcile",)]
    loop.handled(occ)
    loop.check_agreement()
    lccn_status(loop, "done", occ)
