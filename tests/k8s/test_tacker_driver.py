"""Tacker's own v2 Kubernetes management-driver script, unchanged, builds the cluster.

The real Tacker 16.0.0 (the run's bed) INSTANTIATEs a copy of our cluster package whose
management driver is Tacker's sample script ``kubernetes_mgmt_v2.py``, byte for byte as
the sdist has it, and whose ``script_path`` script is our ``install_k8s_cluster.sh``. The
script runs in Tacker's conductor, reads the hosts' addresses from the simulated Heat,
logs in with the test user's password (paramiko, port 22), rewrites each host's
``/etc/hosts``, runs our install script with its own argv on the master, then on each
worker, labels the workers and waits for ``cilium status --wait``. What the hosts had to
be given for it, and why, is in ``tests/testbed/tacker_driver.py``.

Checked: the op-occ COMPLETED, every node Ready on the real control plane under the
names Tacker's scripts give (``master<octet>``, ``worker<octet>``), the script's own
traces on the hosts (its ``/etc/hosts`` lines; our script's end marker), and the
machine's own ``/etc/hosts`` untouched. (Its ``default-token-k8svim`` secret, made from
its ``create_admin_token.yaml``, was not in the cluster afterwards on 1.20.2: the
bearer token the script reads then comes from the automatic ``default-token-*``; not
looked into yet.) (Its ``CIS-node`` worker labels need
``OS-EXT-SRV-ATTR:host`` among the Heat server resource's attributes, which the
simulated Heat does not give, so the script labels nothing here.)
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.testbed import tacker_bed, tacker_driver, testhosts
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import (
    NETWORK_ID,
    TackerClient,
    ext_virtual_links,
    terminate_and_delete,
    unique_name,
)
from tests.testbed.testhosts import TestBed, TestHost, nodes_ready

pytestmark = [pytest.mark.k8s, pytest.mark.tacker, pytest.mark.ssh, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def driver_vnfd(bed: tacker_bed.BedState) -> str:
    """The package copy that runs Tacker's script, onboarded on the run's bed."""
    return tacker_driver.build_and_onboard_driver_package(bed)


def kubectl(bed: TestBed, master: TestHost, *args: str) -> Any:
    """The real kubectl with the master's admin kubeconfig, from this process; JSON."""
    config = bed.private_dir(master, "/etc/kubernetes") / "admin.conf"
    out = subprocess.run(
        [str(testhosts.k8s_bin_dir() / "kubectl"), "--kubeconfig", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")},
    )
    assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
    return json.loads(out.stdout)


def digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def machine_etc_hosts() -> Iterator[str]:
    """The machine's own /etc/hosts' digest; the test must leave it as it was."""
    before = digest("/etc/hosts")
    yield before
    assert digest("/etc/hosts") == before, "the machine's /etc/hosts was changed"


def test_tackers_v2_script_instantiates_simple_and_every_node_is_ready(
    bed: tacker_bed.BedState,
    tacker: TackerClient,
    k8s_sim: SimProcess,
    hosts: TestBed,
    driver_vnfd: str,
    machine_etc_hosts: str,
) -> None:
    master, workers = hosts.hosts[0], hosts.hosts[1:3]
    names = {master: tacker_driver.node_name("master", master)} | {
        w: tacker_driver.node_name("worker", w) for w in workers
    }
    with tacker_driver.prepared_hosts(hosts, [master], workers):
        inst = tacker.create(driver_vnfd, unique_name("tacker-driver-simple"))
        try:
            t0 = time.monotonic()
            occ = tacker.wait_op(
                tacker.start_op(
                    inst,
                    "instantiate",
                    {
                        "flavourId": "simple",
                        "vimConnectionInfo": k8s_sim.vim_connection_info(),
                        "extVirtualLinks": ext_virtual_links(NETWORK_ID),
                        "additionalParams": tacker_driver.driver_params(hosts),
                    },
                ),
                timeout=600,
            )
            elapsed = time.monotonic() - t0
            assert occ["operationState"] == "COMPLETED", occ.get("error")

            # Every node Ready on the real control plane, under Tacker's names.
            nodes = kubectl(hosts, master, "get", "nodes", "-o", "json")
            assert nodes_ready(nodes) == dict.fromkeys(names.values(), True)
            # Each host's /etc/hosts (its own) names every node, as the script wrote it.
            lines = {f"{host.address} {name}" for host, name in names.items()}
            for host in names:
                etc_hosts = subprocess.run(
                    ["nsenter", "-t", str(host.pid), "-m", "cat", "/etc/hosts"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                assert lines <= set(etc_hosts.splitlines()), (host.name, etc_hosts)
                # ... and our install script (the package's script_path) ran to its end.
                assert (hosts.private_dir(host, "/tmp") / "installed").is_file(), host.name
            print(f"Tacker's v2 script: INSTANTIATE simple COMPLETED in {elapsed:.1f} s")
        finally:
            terminate_and_delete(tacker, inst)
