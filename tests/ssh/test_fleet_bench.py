"""``bench/fleet.py`` at tiny sizes, so it cannot rot; and the ports the fleet's hosts share.

Runs the bench as a reader would (a subprocess, its own test hosts), with an
``ssh.max_connections`` below the VMs of the larger size: every cluster must be
built and written back (the bench fails otherwise) while the pool stays at or
under the limit.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from types import ModuleType

import pytest

from tests import REPO

pytestmark = pytest.mark.ssh

BENCH = REPO / "bench"


@pytest.fixture
def fleet(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("fleet")


def test_each_instance_has_three_addresses_at_one_port_and_its_own_cluster(
    fleet: ModuleType,
) -> None:
    for largest in (1, 2, 10, 50, 90):
        count, per, instances, clusters = fleet.layout(largest)
        assert count <= 27 * per and len(instances) == largest
        used = [h for hosts in instances for h in hosts]
        assert len(used) == len(set(used)) and max(used) < count  # no host twice
        for number, hosts in enumerate(instances):
            assert len({h // per for h in hosts}) == 3  # three addresses
            assert len({h % per for h in hosts}) == 1  # one port
            assert [clusters[h] for h in hosts] == [number] * 3


def test_the_fleet_bench_runs_at_tiny_sizes() -> None:
    limit = 4  # the larger size has 6 VMs
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "fleet.py"),
            *("--sizes", "1,2", "--join-cost", "0"),
            *("--max-connections", str(limit)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert re.fullmatch(r"ratio=\d+\.\d\d", lines[-1])
    peaks = {
        int(m["n"]): (int(m["pool"]), int(m["tcp"]))
        for m in re.finditer(
            r"N=(?P<n>\d+): .*ssh_peak=(?P<pool>\d+) \(tcp sampled (?P<tcp>\d+)", proc.stdout
        )
    }
    assert set(peaks) == {1, 2}
    assert peaks[1][0] == 3  # one per VM
    assert 3 <= peaks[2][0] <= limit
