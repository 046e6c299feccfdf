"""``scripts/demo.py`` does what ``docs/demo.md`` promises: with the run's Tacker
(the shared bed, its hooks pointed at the demo's ``serve``), real-mode test hosts of its
own and ``serve`` as a subprocess, it INSTANTIATEs, shows each step live and Tacker's
op-occ state next to serve's job, shows the entry handed back inside the operation with
its token masked, lists the nodes Ready through that entry alone, SCALEs OUT by one
worker, HEALs a worker whose VM broke and TERMINATEs.
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

pytestmark = [pytest.mark.k8s, pytest.mark.tacker, pytest.mark.ssh, pytest.mark.timeout(900)]

DEMO = REPO / "scripts" / "demo.py"


def seconds(age: str) -> int:
    """kubectl's AGE column ("42s", "3m10s", "2m") in seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smhd])", age))


def test_demo_builds_a_cluster_reachable_through_the_written_back_entry(
    bed: tb.BedState, tmp_path: Path
) -> None:
    assert bed.vnfd_id
    state = tmp_path / "bed.json"
    state.write_text(json.dumps(asdict(bed)))
    out = subprocess.run(
        [sys.executable, str(DEMO), "--scale", "--heal", "--bed-state", str(state)],
        capture_output=True,
        text=True,
        timeout=840,
    )
    text = out.stdout
    assert out.returncode == 0, text[-3000:] + out.stderr[-3000:]
    # The cluster job, live, step by step.
    for step in ("discover", "init-master-master", "join-workers", "write-back"):
        assert re.search(rf"cluster-instantiate\s+{step}\S*\s+done", text), step
    assert re.search(r"cluster-scale\s+join-workers\s+done .* worker\d+", text)
    # With Tacker's hooks (the default): each op-occ COMPLETED only with its job done.
    assert "Tacker's hooks     http://127.0.0.1:" in text
    for operation in ("INSTANTIATE", "SCALE", "HEAL", "TERMINATE"):
        assert re.search(
            rf"Tacker: {operation} COMPLETED .*\n\s+serve:\s+COMPLETED \(from hook\): job done",
            text,
        ), [line for line in text.splitlines() if "Tacker:" in line or "serve:" in line]
    assert "entry Tacker now holds (handed back inside the INSTANTIATE)" in text
    assert not bed.hook_config.exists()  # the other tests run without the hook
    # The entry Tacker holds, token masked ...
    assert "vimType      ETSINFV.KUBERNETES.V_1" in text
    assert re.search(r"bearer_token eyJ\w{3}\.\.\.\(\d+ chars\)", text)
    assert not re.search(r"eyJ[\w-]{20,}", text + out.stderr)  # no token anywhere
    # ... and the nodes through it: three, then four after SCALE_OUT, all Ready.
    tables = re.findall(r"NAME\s+STATUS.*?\n((?:\s+\S+\s+Ready.*\n)+)", text)
    assert [len(t.strip().splitlines()) for t in tables] == [3, 4, 4], tables
    # The healed worker (the oldest, not the one SCALE_OUT added): its old Node deleted,
    # the rebuilt VM joined again under the same name, so now it is the youngest node.
    healed = re.search(r"HEAL of worker VNFC \S+ \((\S+), its VM broken\)", text)
    assert healed, text[-3000:]
    name = "worker" + healed.group(1).rsplit(".", 1)[1]
    assert re.search(r"cluster-heal\s+retire-nodes\s+done", text)
    assert re.search(rf"cluster-heal\s+join-workers\s+done .* {name}", text)
    ages = {
        row.split()[0]: row.split()[3]  # NAME STATUS ROLES AGE
        for row in tables[2].strip().splitlines()
    }
    assert ages[name] == min(ages.values(), key=seconds), ages
    assert "Tacker's vimConnectionInfo now: {}; serve forgot the cluster" in text
