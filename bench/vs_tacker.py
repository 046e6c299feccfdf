"""Tacker's own v2 Kubernetes management-driver script against ``serve``, on the same hosts.

What runs, one after the other and never at once (2 cores), on the same fresh real-mode
hosts (``tests/testbed/testhosts.py``: real kubeadm 1.20.2, kube-apiserver, etcd,
controller-manager and scheduler; the kubelet is the stand-in process), the same real
Tacker 16.0.0 and the same simulated OpenStack (its servers take the hosts' addresses):

* **Tacker**: a copy of our cluster package whose management driver is Tacker's sample
  script ``kubernetes_mgmt_v2.py`` from its sdist, unchanged, with our
  ``install_k8s_cluster.sh`` as its ``script_path`` script
  (``tests/testbed/tacker_driver.py``). It runs in Tacker's conductor, logs in with
  paramiko and a password, joins the workers one by one.
* **ours**: our cluster package as it is; ``serve`` (a subprocess, subscribed to Tacker)
  builds the cluster from the notifications over SSH with the same install script and
  writes ``vimConnectionInfo`` back into the instance.

Both packages have the same content apart from the management driver, both with room
for 5 workers (``tacker_driver.with_room``: the package's own limit is 4).

What is timed, from the LCM request's 202 (``POST .../instantiate`` or ``.../scale``):

* Tacker's script: until its op-occ is COMPLETED and every node is Ready in the API
  server. The script collects the cluster's access data and then discards it, so there
  is no write-back to wait for;
* ours: until every node is Ready *and* the access data is in Tacker (INSTANTIATE: our
  ``vimConnectionInfo`` entry in Tacker's stored instance) or, for SCALE_OUT (the
  access data is unchanged), serve's job for the op-occ is done.

Both ends are polled once a second (the nodes with the real ``kubectl`` from this
process). Cases (``--cases``, default all):

* ``simple``: INSTANTIATE 1 master + 2 workers;
* ``complex``: INSTANTIATE 3 masters behind the VIP (haproxy, keepalived) + 2 workers;
* ``scale_out``: SCALE_OUT by 3 workers (3 steps of ``workerNode_scale``) of a simple
  cluster instantiated just before (not timed).

The last line is ``ratio=<Tacker's total / ours>`` over the cases run.

The ceiling: each case also prints how many of serve's seconds went to its kubeadm steps
(``init-master-*``, ``join-master-*``, ``join-workers``: each one probe and the install
script's ``kubeadm init`` or ``join``; the job runs them one after the other), and the
``ceiling`` line puts Tacker's total over their sum: the ratio a driver would reach if
everything but kubeadm's own time (Heat, notifications, the other steps, the write-back)
cost nothing, running kubeadm in serve's order (masters one at a time, workers at once).
serve's kubeadm steps are printed one by one, and for both drivers when each host's
install script ended (its ``/tmp/installed``), in seconds from the 202: where the time
of each went.

Fidelity: when a case has ended, before TERMINATE, what each driver left is read: every
node's Ready condition, roles and labels in the API server, the node names each VM's
``/etc/hosts`` gives an address (not the loopback line the bed adds for Tacker's sudo),
and the Kubernetes entry of the instance's
``vimConnectionInfo`` in Tacker's store (its keys; the values are secrets). Each case
prints what differs between the two (``fidelity <case>: ...``), or that nothing does.

What differs from a real deployment (the same for both unless said):

* the VMs are sshd hosts in network namespaces of this machine: no VM boot, no cloud-init,
  no image; OpenStack (Keystone, Heat, Nova, Neutron) is the simulator, so Heat's part
  of each op takes about a second;
* the install script skips its packages and CNI phases (``K8S_SKIP_PHASES``: no apt,
  no container runtime, no Cilium) and kubeadm's preflight; the binaries are already
  on the hosts. So the time of both is the orchestration plus kubeadm, not downloads;
* the kubelet is a stand-in that registers the node and reports it Ready: no pods run;
* for Tacker's script only (``tests/testbed/tacker_driver.py`` says why): the test
  user has passwordless sudo (as a cloud image's default user does); each host has a
  private ``/etc/hosts`` the script's ``sudo mv`` can replace; the hosts already carry
  the names the script gives (``master<octet>``/``worker<octet>``); a ``kubectl`` shim
  says "command not found" until the install has left a kubeconfig (the packages phase
  would bring kubectl on a VM); a ``cilium`` shim answers ``cilium status --wait`` once
  every node is Ready (no CNI); the install script's environment comes from sshd's
  ``SetEnv``; the hosts get a default route on their own link (no gateway), without
  which ``kubeadm token create`` warns on stderr and the script's SCALE_OUT fails. The
  script's ``CIS-node`` worker labels need the server's compute host
  (``OS-EXT-SRV-ATTR:host``), which the simulated Heat does not give: it labels nothing
  here; on a real cloud it runs one ``kubectl label`` per worker more;
* ours logs in as root with a key on the masters and as the test user with a password
  on the workers; Tacker's script uses the password on every node.

Needs root and the real parts (``scripts/setup.d/10-sshd.sh``, ``20-tacker.sh``,
``21-tacker-sdist.sh``, ``40-k8s.sh``). Takes several minutes a case:
``sudo .venv/bin/python bench/vs_tacker.py [--cases simple,complex,scale_out]``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/vs_tacker.py` from a checkout
    sys.path.insert(0, str(ROOT))

from benchlib import machine  # noqa: E402

from tests.testbed import tacker_bed, tacker_driver, testhosts  # noqa: E402
from tests.testbed.cluster_vnf import k8s_params  # noqa: E402
from tests.testbed.openstack_sim.process import SimProcess  # noqa: E402
from tests.testbed.tacker_api import (  # noqa: E402
    NETWORK_ID,
    TackerClient,
    instantiate_request,
    terminate_and_delete,
    unique_name,
    wait_for,
)
from tests.testbed.tacker_serve import VIM_KEY, ServeProcess, serve_config  # noqa: E402
from tests.testbed.testhosts import TestBed, TestHost  # noqa: E402

TIMEOUT = 900.0
POLL = 1.0
MAX_WORKERS = 5  # 2 at instantiation + the SCALE_OUT's 3
FAILED = ("FAILED_TEMP", "FAILED", "ROLLED_BACK")


# Labels that say the same thing on any node of one cluster (or are its own name).
_PER_NODE_LABELS = ("kubernetes.io/hostname",)


def outcome(
    bed: tacker_bed.BedState, hosts: TestBed, master: TestHost, members: list[TestHost], inst: str
) -> dict[str, Any]:
    """What a driver left of the cluster of ``inst`` (see the module's "Fidelity")."""
    nodes = testhosts.nodes_json(hosts, master) or {"items": []}
    found: dict[str, Any] = {"nodes": {}, "etc_hosts": {}, "access": [], "installed": {}}
    for node in nodes["items"]:
        labels = {
            f"{k}={v}"
            for k, v in node["metadata"].get("labels", {}).items()
            if k not in _PER_NODE_LABELS
        }
        found["nodes"][node["metadata"]["name"]] = {
            "ready": testhosts.nodes_ready({"items": [node]})[node["metadata"]["name"]],
            "labels": sorted(labels),
        }
    for host in members:
        lines = testhosts.inside(host, "cat", "/etc/hosts").stdout.splitlines()
        named = {
            " ".join(line.split()[:2])
            for line in lines
            if len(line.split()) >= 2
            and not line.startswith("127.")  # the bed's own-name line for Tacker's sudo
            and re.fullmatch(r"(master|worker)\d+", line.split()[1])
        }
        found["etc_hosts"][host.name] = sorted(named)
        done = testhosts.inside(host, "date", "-r", "/tmp/installed", "+%s.%N")
        if done.returncode == 0 and done.stdout.strip():
            found["installed"][host.name] = float(done.stdout.strip())
    stored = tacker_bed.stored_vim_connection_info(bed, inst) or {}
    for entry in stored.values():
        if "KUBERNETES" in str(entry.get("vimType", "")).upper():
            keys = [
                f"{part}.{k}"
                for part in ("interfaceInfo", "accessInfo")
                for k in sorted(entry.get(part) or {})
            ]
            found["access"] = keys
    return found


def timeline(left: dict[str, Any]) -> str:
    """When each host's install script ended (its ``/tmp/installed``), in seconds from the
    timed request's 202 (``left["started"]``), in that order: the install scripts of a
    driver's run, one line."""
    started = left["started"]
    ends = sorted((t - started, name) for name, t in left["installed"].items() if t >= started)
    return ", ".join(f"{name} +{t:.1f}" for t, name in ends) or "none"


def differences(tacker: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """What differs between Tacker's driver's outcome and ours, one line each."""
    lines = []
    t_nodes, o_nodes = tacker["nodes"], ours["nodes"]
    if sorted(t_nodes) != sorted(o_nodes):
        lines.append(f"node names: Tacker {sorted(t_nodes)}, ours {sorted(o_nodes)}")
    for name in sorted(set(t_nodes) & set(o_nodes)):
        t, o = t_nodes[name], o_nodes[name]
        if t["ready"] != o["ready"]:
            lines.append(f"{name} Ready: Tacker {t['ready']}, ours {o['ready']}")
        only_t = sorted(set(t["labels"]) - set(o["labels"]))
        only_o = sorted(set(o["labels"]) - set(t["labels"]))
        if only_t or only_o:
            lines.append(f"{name} labels only Tacker's: {only_t}; only ours: {only_o}")
    for host in sorted(set(tacker["etc_hosts"]) | set(ours["etc_hosts"])):
        t_h, o_h = tacker["etc_hosts"].get(host, []), ours["etc_hosts"].get(host, [])
        if t_h != o_h:
            lines.append(f"{host} /etc/hosts names: Tacker {t_h}, ours {o_h}")
    if tacker["access"] != ours["access"]:
        t_a, o_a = tacker["access"] or "none", ours["access"] or "none"
        lines.append(f"access data in Tacker: Tacker's {t_a}, ours {o_a}")
    return lines


@dataclass(frozen=True)
class Case:
    flavour: str
    masters: int
    workers: int  # at instantiation
    added: int = 0  # by the timed SCALE_OUT (0: the INSTANTIATE is timed)

    @property
    def hosts(self) -> int:
        return self.masters + self.workers + self.added

    @property
    def what(self) -> str:
        if self.added:
            return f"SCALE_OUT by {self.added} workers ({self.masters} master + {self.workers})"
        return f"INSTANTIATE {self.flavour} ({self.masters} master(s) + {self.workers} workers)"


CASES = {
    "simple": Case("simple", 1, 2),
    "complex": Case("complex", 3, 2),
    "scale_out": Case("simple", 1, 2, added=3),
}


def split(case: Case, hosts: TestBed) -> tuple[list[TestHost], list[TestHost], list[TestHost]]:
    """(masters, workers at instantiation, workers the SCALE_OUT adds): the simulator hands
    the hosts' addresses out in order, masters first."""
    h = hosts.hosts
    m, w = case.masters, case.workers
    return h[:m], h[m : m + w], h[m + w : case.hosts]


def all_ready(hosts: TestBed, master: TestHost, count: int) -> bool:
    nodes = testhosts.ready_nodes(hosts, master)
    return len(nodes) == count and all(nodes.values())


def until(end: Callable[[], bool], what: str) -> float:
    """Seconds until ``end()`` (polled every second), from now."""
    t0 = time.monotonic()
    wait_for(lambda: end() or None, timeout=TIMEOUT, interval=POLL, what=what)
    return time.monotonic() - t0


def scale_request(added: int, params: dict[str, Any]) -> dict[str, Any]:
    """SCALE_OUT by ``added`` steps of one worker; Tacker's script reads the installation
    parameters from the request, so both are given them."""
    return {
        "type": "SCALE_OUT",
        "aspectId": "workerNode_scale",
        "numberOfSteps": added,
        "additionalParams": params,
    }


@dataclass(frozen=True)
class Rig:
    """What both drivers run on: one Tacker, one simulated OpenStack, the same hosts."""

    bed: tacker_bed.BedState
    tacker: TackerClient
    sim: SimProcess
    hosts: TestBed

    def request(self, case: Case, params: dict[str, Any]) -> dict[str, Any]:
        """The case's instantiate request with ``params`` as its ``additionalParams``."""
        vim = self.sim.vim_connection_info()
        return instantiate_request(vim, params, NETWORK_ID, flavour=case.flavour)


def timed_op(
    rig: Rig,
    case: Case,
    vnfd: str,
    name: str,
    params: dict[str, Any],
    end: Callable[[str, str, int, str], bool],
) -> tuple[float, dict[str, Any]]:
    """Create an instance and INSTANTIATE it, then (``case.added``) SCALE_OUT; seconds from
    the timed request's 202 until ``end(inst, occ, node count, operation)``, and what the
    driver left then (:func:`outcome`). TERMINATE and DELETE after."""
    tacker = rig.tacker
    masters, workers, added = split(case, rig.hosts)
    body = rig.request(case, params)
    inst = tacker.create(vnfd, unique_name(name))
    try:
        count = case.masters + case.workers
        occ = tacker.start_op(inst, "instantiate", body)
        started = time.time()
        seconds = until(lambda: end(inst, occ, count, "INSTANTIATE"), f"{name}: INSTANTIATE")
        if case.added:
            count += case.added
            occ = tacker.start_op(inst, "scale", scale_request(case.added, params))
            started = time.time()
            seconds = until(lambda: end(inst, occ, count, "SCALE"), f"{name}: SCALE_OUT")
        left = outcome(rig.bed, rig.hosts, masters[0], masters + workers + added, inst)
        return seconds, {**left, "started": started}
    except BaseException:
        print(f"{name}: op-occ {tacker.op_occ(occ).get('operationState')}", file=sys.stderr)
        raise
    finally:
        terminate_and_delete(tacker, inst)


def run_tacker(case: Case, rig: Rig, vnfd: str) -> tuple[float, dict[str, Any]]:
    tacker, hosts = rig.tacker, rig.hosts
    masters, workers, added = split(case, hosts)
    with tacker_driver.prepared_hosts(hosts, masters, workers + added):
        params = tacker_driver.driver_params(hosts, ha=case.masters > 1)

        def end(inst: str, occ: str, count: int, operation: str) -> bool:
            state = tacker.op_occ(occ)["operationState"]
            if state in FAILED:
                raise AssertionError(f"Tacker's script: {tacker.op_occ(occ).get('error')}")
            return state == "COMPLETED" and all_ready(hosts, masters[0], count)

        return timed_op(rig, case, vnfd, f"vs-tacker-driver-{case.flavour}", params, end)


# serve's steps that run kubeadm (each one probe and the install script's init or join).
_KUBEADM_STEPS = re.compile(r"(init-master|join-master)-.+|join-workers")


def kubeadm_steps(serve: ServeProcess, occ: str) -> list[tuple[str, float]]:
    """``(name, seconds)`` of serve's kubeadm steps of its job for ``occ``, in their order:
    the part of its time any driver running kubeadm with this install script waits for,
    in the order kubeadm allows (masters one at a time; serve's workers at once)."""
    found = []
    for event in serve.events():
        if event["vnfLcmOpOccId"] != occ:
            continue
        for job in serve.event(event["id"])["jobs"]:
            for step in job["steps"]:
                if _KUBEADM_STEPS.fullmatch(step["name"]) and step["finishedAt"]:
                    found.append((step["name"], step["finishedAt"] - step["startedAt"]))
    return found


def run_ours(case: Case, rig: Rig, vnfd: str, tmp: Path) -> tuple[float, dict[str, Any], float]:
    """Seconds, what serve left, and the seconds of that in its kubeadm steps."""
    bed, tacker, sim, hosts = rig.bed, rig.tacker, rig.sim, rig.hosts
    masters, _, _ = split(case, hosts)
    serve = ServeProcess(tmp, serve_config(bed, sim, hosts))
    serve.start(timeout=120.0)  # a loaded machine: other runs share the 2 cores
    try:
        tacker.wait_subscribed(serve.callback_url, timeout=60)
        params = k8s_params(
            master_user="root",
            worker_user=hosts.user or "root",
            key=str(hosts.client_key),
            password=hosts.password,
            ha=case.masters > 1,
        )

        def end(inst: str, occ: str, count: int, operation: str) -> bool:
            if not all_ready(hosts, masters[0], count):
                return False
            if operation == "INSTANTIATE":
                return VIM_KEY in (tacker_bed.stored_vim_connection_info(bed, inst) or {})
            mine = [
                e
                for e in serve.events()
                if e["vnfLcmOpOccId"] == occ and e["operationState"] == "COMPLETED"
            ]
            if any(e["status"] == "failed" for e in mine):
                raise AssertionError(f"serve's job of {occ} failed")
            return any(e["status"] == "done" for e in mine)

        ended: list[str] = []

        def timed_end(inst: str, occ: str, count: int, operation: str) -> bool:
            if end(inst, occ, count, operation):
                ended.append(occ)
                return True
            return False

        seconds, left = timed_op(
            rig, case, vnfd, f"vs-tacker-serve-{case.flavour}", params, timed_end
        )
        steps = kubeadm_steps(serve, ended[-1])
        print("serve's kubeadm steps: " + ", ".join(f"{n} {t:.1f} s" for n, t in steps), flush=True)
        return seconds, left, sum(t for _, t in steps)
    finally:
        serve.stop()
        tacker.unsubscribe_all(serve.callback_url)


def fresh(hosts: TestBed) -> None:
    """The hosts as new VMs: no cluster, no files, their own names."""
    testhosts.reset_cluster(hosts)
    for host in hosts.hosts:
        subprocess.run(["nsenter", "-t", str(host.pid), "-u", "hostname", host.name], check=False)


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def parse(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated: %(default)s")
    cases = [c for c in parser.parse_args(argv).cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown or not cases:
        parser.error(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    return cases


def main(argv: list[str] | None = None) -> int:
    cases = parse(argv)
    print(machine())
    count = max(CASES[c].hosts for c in cases)
    hosts = testhosts.create(count, password=True, kubernetes="real")
    sim = SimProcess(
        server_pool=",".join(h.address for h in hosts.hosts), vip_pool=hosts.unused_address
    )
    sim.start()
    bed = tacker_bed.start(owner_pid=os.getpid())
    try:
        ours_vnfd = tacker_bed.build_and_onboard(
            bed, extra=dict(tacker_driver.flavours(max_workers=MAX_WORKERS))
        )
        driver_vnfd = tacker_driver.build_and_onboard_driver_package(bed, max_workers=MAX_WORKERS)
        tacker = TackerClient(bed.url)
        rig = Rig(bed, tacker, sim, hosts)
        t_tacker = t_ours = t_kubeadm = 0.0
        for name in cases:
            case = CASES[name]
            fresh(hosts)
            tacker_s, tacker_left = run_tacker(case, rig, driver_vnfd)
            print(
                f"{name}: {case.what}, Tacker's v2 script {tacker_s:.1f} s "
                f"(202 -> op-occ COMPLETED, every node Ready; load {loadavg()})",
                flush=True,
            )
            fresh(hosts)
            with tempfile.TemporaryDirectory(prefix="vs-tacker-") as tmp:
                ours_s, ours_left, kubeadm_s = run_ours(case, rig, ours_vnfd, Path(tmp))
            end = "access data in Tacker" if not case.added else "serve's job done"
            print(
                f"{name}: {case.what}, serve {ours_s:.1f} s (202 -> every node Ready, {end}; "
                f"load {loadavg()}); Tacker/ours {tacker_s / ours_s:.2f}",
                flush=True,
            )
            print(
                f"{name}: of serve's {ours_s:.1f} s, {kubeadm_s:.1f} s in its kubeadm steps; "
                f"Tacker / that {tacker_s / kubeadm_s:.2f}",
                flush=True,
            )
            print(
                f"{name}: install scripts ended, Tacker's: {timeline(tacker_left)}",
                flush=True,
            )
            print(
                f"{name}: install scripts ended, serve's: {timeline(ours_left)}",
                flush=True,
            )
            diff = differences(tacker_left, ours_left)
            print(f"fidelity {name}: " + ("; ".join(diff) if diff else "no difference"), flush=True)
            t_tacker += tacker_s
            t_ours += ours_s
            t_kubeadm += kubeadm_s
        fresh(hosts)
        print(f"total ({', '.join(cases)}): Tacker {t_tacker:.1f} s, ours {t_ours:.1f} s")
        print(
            f"ceiling: Tacker {t_tacker:.1f} s / serve's kubeadm steps {t_kubeadm:.1f} s = "
            f"{t_tacker / t_kubeadm:.2f} (the ratio a driver would reach with nothing but "
            "kubeadm's own time, run in the order serve runs it)"
        )
        print(f"ratio={t_tacker / t_ours:.2f}")
    finally:
        tacker_bed.stop(bed)
        sim.stop()
        testhosts.destroy(hosts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
