"""``scripts/demo.py`` does what ``docs/demo.md`` promises: with the run's Tacker
(the shared bed, its hooks pointed at the demo's ``serve``), real-mode test hosts of its
own and ``serve`` as a subprocess, it INSTANTIATEs, shows each step live and Tacker's
op-occ state next to serve's job, shows the entry handed back inside the operation with
its token masked, lists the nodes Ready through that entry alone, SCALEs OUT by one
worker, HEALs a worker whose VM broke and TERMINATEs; and the same through Tacker's v1
API (``--api v1``), with the cluster registered as Tacker's Kubernetes VIM and a CNF
deployed on it through v1 (``--cnf``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from tests import REPO
from tests.testbed import tacker_bed as tb
from tests.testbed.openstack_sim.control import SimControl

pytestmark = [pytest.mark.k8s, pytest.mark.tacker, pytest.mark.ssh, pytest.mark.timeout(900)]

DEMO = REPO / "scripts" / "demo.py"


def seconds(age: str) -> int:
    """kubectl's AGE column ("42s", "3m10s", "2m") in seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smhd])", age))


def run_demo(bed: tb.BedState, tmp_path: Path, *args: str) -> tuple[str, str]:
    """The demo on the run's bed; its stdout and stderr once it succeeded."""
    state = tmp_path / "bed.json"
    state.write_text(json.dumps(asdict(bed)))
    out = subprocess.run(
        [sys.executable, str(DEMO), *args, "--bed-state", str(state)],
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout, out.stderr


def assert_each_completed_with_its_job(text: str, source: str) -> None:
    """Each operation's op-occ COMPLETED, and serve's job for it (from ``source``) done."""
    for operation in ("INSTANTIATE", "SCALE", "HEAL", "TERMINATE"):
        assert re.search(
            rf"Tacker: {operation} COMPLETED .*\n\s+serve:\s+COMPLETED \(from {source}\): job done",
            text,
        ), [line for line in text.splitlines() if "Tacker:" in line or "serve:" in line]


def healed_worker_is_youngest(text: str) -> str:
    """The node tables after INSTANTIATE, SCALE_OUT and HEAL: three nodes, then four, all
    Ready; the healed worker (one of INSTANTIATE's, not the one SCALE_OUT added) had its
    old Node deleted and its rebuilt VM joined again under the same name, so it is now the
    youngest node. Returns its name."""
    tables = re.findall(r"NAME\s+STATUS.*?\n((?:\s+\S+\s+Ready.*\n)+)", text)
    assert [len(t.strip().splitlines()) for t in tables] == [3, 4, 4], tables
    healed = re.search(r"HEAL of worker VNFC \S+ \((\S+), its VM broken\)", text)
    assert healed, text[-3000:]
    name = "worker" + healed.group(1).rsplit(".", 1)[1]
    ages = {
        row.split()[0]: row.split()[3]  # NAME STATUS ROLES AGE
        for row in tables[2].strip().splitlines()
    }
    assert ages[name] == min(ages.values(), key=seconds), ages
    return name


def test_demo_builds_a_cluster_reachable_through_the_written_back_entry(
    bed: tb.BedState, tmp_path: Path
) -> None:
    assert bed.vnfd_id
    text, stderr = run_demo(bed, tmp_path, "--scale", "--heal")
    # The cluster job, live, step by step.
    for step in ("discover", "init-master-master", "join-workers", "write-back"):
        assert re.search(rf"cluster-instantiate\s+{step}\S*\s+done", text), step
    assert re.search(r"cluster-scale\s+join-workers\s+done .* worker\d+", text)
    # With Tacker's hooks (the default): each op-occ COMPLETED only with its job done.
    assert "Tacker's hooks     http://127.0.0.1:" in text
    assert_each_completed_with_its_job(text, "hook")
    assert "entry Tacker now holds (handed back inside the INSTANTIATE)" in text
    assert not bed.hook_config.exists()  # the other tests run without the hook
    # The entry Tacker holds, token masked ...
    assert "vimType      ETSINFV.KUBERNETES.V_1" in text
    assert re.search(r"bearer_token eyJ\w{3}\.\.\.\(\d+ chars\)", text)
    assert not re.search(r"eyJ[\w-]{20,}", text + stderr)  # no token anywhere
    # ... and the nodes through it: three, then four after SCALE_OUT, all Ready.
    name = healed_worker_is_youngest(text)
    assert re.search(r"cluster-heal\s+retire-nodes\s+done", text)
    assert re.search(rf"cluster-heal\s+join-workers\s+done .* {name}", text)
    assert "Tacker's vimConnectionInfo now: {}; serve forgot the cluster" in text


def test_demo_api_v1_scales_and_heals_on_the_real_control_plane_behind_its_kubernetes_vim(
    bed: tb.BedState, tmp_path: Path
) -> None:
    """Seed 000 through the v1 API (``--api v1``): the v1 package, an OpenStack VIM, serve
    on v1 and no hooks. INSTANTIATE registers ``kubernetes_vim_<id>`` (Tacker's VIM driver
    reads the regions from the real API server with the token and keeps its Fernet key in
    the bed's Barbican), the instance gets seed 000's entry, SCALE_OUT and HEAL of a worker
    run on the real control plane; a CNF (VNF-B, ``--cnf``) is deployed through v1 with
    that VIM and removed again; and TERMINATE deletes the VIM, and Tacker its key."""
    keys = SimControl(bed.sim_url)
    before = {s["id"] for s in keys.state()["secrets"]}
    text, _ = run_demo(bed, tmp_path, "--api", "v1", "--scale", "--heal", "--cnf")
    assert "hooks     off (v1 has no management-driver scripts)" in text
    assert_each_completed_with_its_job(text, "http")
    assert re.search(r"cluster-instantiate\s+register-vim\s+done", text)
    # Seed 000's `vnflcm show`: the VIM and its URL (the first host is the master).
    inst = re.search(r"INSTANTIATE \(simple flavour\) of VNF instance (\S+) \(API v1\)", text)
    assert inst, text[-3000:]
    endpoint = re.search(r"vimType +kubernetes\n +vimId +\S+\n +authUrl +(https://\S+):6443", text)
    assert endpoint, text[-3000:]
    assert "BEGIN CERTIFICATE" not in text
    assert f"VIM kubernetes_vim_{inst.group(1)}: ACTIVE (token key: barbican_key)" in text
    regions = re.search(r"regions \(the cluster's namespaces.*\): (.+)", text)
    assert regions and {"default", "kube-system"} <= set(regions.group(1).split(", "))
    # Three nodes, four after SCALE_OUT; the healed worker rejoined, the youngest again.
    healed_worker_is_youngest(text)
    # --cnf: VNF-B (the sample CNF) deployed by Tacker's v1 Kubernetes infra driver
    # through the VIM serve registered: COMPLETED, a VNFC per pod, its Deployment Ready
    # on the master; terminated and deleted, the Deployment gone with it.
    cnf = text[text.index("== CNF (VNF-B) on VNF-A's cluster") : text.index("== TERMINATE")]
    assert "Tacker: VNF-B INSTANTIATE COMPLETED" in cnf, cnf
    assert re.search(r"VNF-B's VNFCs .*: lccn-web-\S+, lccn-web-\S+\n", cnf), cnf
    assert re.search(r"\n\s+lccn-web\s+2/2\s+2\s+2\s", cnf), cnf
    assert "Tacker: VNF-B TERMINATE COMPLETED" in cnf, cnf
    assert re.search(r"VNF-B deleted \(GET answers 404\).*\n.*NotFound.*\"lccn-web\"", cnf), cnf
    # serve heard VNF-B through the same subscription; its cluster jobs ended, done, at
    # their parameters (a CNF, not a cluster of VMs).
    for job in ("cluster-instantiate", "cluster-terminate"):
        assert re.search(rf"{job}\s+load-params\s+skipped", cnf), cnf
    assert cnf.count("serve:  COMPLETED: job done") == 2, cnf
    # TERMINATE: our entry and VIM gone; Tacker deleted the key it had put in Barbican.
    assert "Tacker's Kubernetes entries now: []; its VIM deleted: True" in text
    assert {s["id"] for s in keys.state()["secrets"]} == before
