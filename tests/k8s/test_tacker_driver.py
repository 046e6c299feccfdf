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
machine's own ``/etc/hosts`` untouched. Then VNF-B, the sample CNF
(``scripts/vnf_package/cnf_deployment``, the Deployment ``lccn-web`` of two replicas),
on that cluster through Tacker v2: the script keeps no access data in Tacker, so the
test reads what it collected (``tacker_driver.collected_access``: the master's API
server, its ``/etc/kubernetes/pki/ca.crt``, the bearer token of the first
``default-token*`` secret, the ``default`` service account the script binds to
``cluster-admin``) and hands it over as an operator would, in the CNF's
InstantiateVnfRequest ``vimConnectionInfo`` (vimType ``kubernetes``, interfaceInfo
``endpoint`` and ``ssl_ca_cert``, accessInfo ``bearer_token``; the token in the request
body only, a ``cnf.Secret`` so no traceback shows it). Checked: VNF-B's INSTANTIATE
COMPLETED, its Deployment 2/2 available on the real API server and labelled with VNF-B's
instance, the instance showing no token, TERMINATE COMPLETED with the Deployment gone,
and the instance deleted. (Its ``default-token-k8svim`` secret, made from
its ``create_admin_token.yaml``, was not in the cluster afterwards on 1.20.2: the
bearer token the script reads then comes from the automatic ``default-token-*``; not
looked into yet.) (Its ``CIS-node`` worker labels need
``OS-EXT-SRV-ATTR:host`` among the Heat server resource's attributes, which the
simulated Heat does not give, so the script labels nothing here.)

The same for Tacker's v1 driver class (``KubernetesMgmtDriver`` of the sdist's
``kubernetes_mgmt.py``, "K1"), which the conductor imports and calls in its own process:
a v1 INSTANTIATE of a copy of our v1 package naming it, on an OpenStack VIM registered
as seed 000 does, on a Tacker of its own (whose conductor runs eventlet-patched).
Checked: the op-occ COMPLETED, every node Ready under Tacker's names,
the Kubernetes VIM K1 registers (``GET /v1.0/vims``, ``auth_url`` the master's API
server) and the instance's ``vimConnectionInfo`` entry naming it; then VNF-B through
Tacker v1 on that VIM, as a v1 user deploys a CNF (the v1 copy of the CNF's flavour,
``vimConnectionInfo: [{vimId, vimType: kubernetes}]``,
``additionalParams["lcm-kubernetes-def-files"]``; Tacker's v1 Kubernetes infra driver
takes the endpoint, CA and token from the VIM): its INSTANTIATE COMPLETED, the
Deployment 2/2 available on the real API server, TERMINATE COMPLETED with the Deployment
gone and the instance deleted; then the cluster's TERMINATE deleting K1's VIM, and the
machine's ``/etc/hosts`` untouched. What it took is in
``tests/testbed/tacker_driver_v1.py``; the CNF's requests are ``tests/testbed/cnf.py``'s,
which ``scripts/demo.py --api v1 --cnf`` uses for the cluster ``serve`` built.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.testbed import cnf, tacker_bed, tacker_driver, tacker_driver_v1, testhosts
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import (
    NETWORK_ID,
    TackerClient,
    ext_virtual_links,
    terminate_and_delete,
    unique_name,
)
from tests.testbed.tacker_v1 import V1Tacker, v1_ext_virtual_links, v1_vim_connection_info
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

            # VNF-B on that cluster: the script kept no access data in Tacker, so the
            # operator hands the cluster over in the CNF's request, with what the script
            # collected (endpoint, CA, the default service account's token).
            access = tacker_driver.collected_access(hosts, master)
            assert access["endpoint"] == f"https://{master.address}:6443"
            entry = cnf.v2_kubernetes_entry(**access)
            took = cnf_through_v2(bed, tacker, hosts, master, entry)
            print(f"VNF-B through v2 on its cluster: {took}")
        finally:
            terminate_and_delete(tacker, inst)


def available(bed: TestBed, master: TestHost) -> tuple[int, int] | None:
    """The CNF's Deployment on the real control plane: (replicas, available replicas), or
    None when there is none."""
    found = cnf.deployment(bed, master)
    if found is None:
        return None
    return found["spec"]["replicas"], found["status"].get("availableReplicas", 0)


def cnf_round_trip(
    tacker: TackerClient | V1Tacker,
    hosts: TestBed,
    master: TestHost,
    vnfd: str,
    name: str,
    request: dict[str, Any],
    check: Callable[[str], None] | None = None,
) -> str:
    """VNF-B (the sample CNF, package ``vnfd``) INSTANTIATEd with ``request``, its
    Deployment 2/2 available on the master's API server (and ``check(instance)``), then
    TERMINATE removing it and DELETE of the instance; the times taken (onboarding
    included, the caller's)."""
    t0 = time.monotonic()
    b = tacker.create(vnfd, unique_name(name))
    try:
        # Any token goes in the request body only.
        occ = tacker.wait_op(tacker.start_op(b, "instantiate", request), timeout=300)
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        took_instantiate = time.monotonic() - t0
        assert available(hosts, master) == (cnf.REPLICAS, cnf.REPLICAS)
        if check is not None:
            check(b)

        t1 = time.monotonic()
        occ = tacker.wait_op(
            tacker.start_op(b, "terminate", {"terminationType": "FORCEFUL"}), timeout=300
        )
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        assert available(hosts, master) is None
        took_terminate = time.monotonic() - t1
    finally:
        terminate_and_delete(tacker, b)
    status, _, _ = tacker.call("GET", f"{tacker.lcm}/vnf_instances/{b}")
    assert status == 404, status
    return f"INSTANTIATE {took_instantiate:.1f} s, TERMINATE {took_terminate:.1f} s"


def cnf_through_v2(
    bed: tacker_bed.BedState,
    tacker: TackerClient,
    hosts: TestBed,
    master: TestHost,
    entry: dict[str, Any],
) -> str:
    """VNF-B through Tacker v2 on the cluster of ``entry``, its Deployment labelled with
    the instance; Tacker's API never shows the token back."""

    def labelled_and_no_token(b: str) -> None:
        labels = (cnf.deployment(hosts, master) or {})["metadata"].get("labels") or {}
        assert labels.get("tacker_vnf_instance_id") == b, labels
        assert "bearer_token" not in json.dumps(tacker.show(b)["vimConnectionInfo"])

    t0 = time.monotonic()
    vnfd = cnf.build_and_onboard(bed)
    onboarded = time.monotonic() - t0
    request = cnf.v2_instantiate_request(entry)
    took = cnf_round_trip(
        tacker, hosts, master, vnfd, "tacker-driver-cnf", request, labelled_and_no_token
    )
    return f"onboarding {onboarded:.1f} s, {took}"


@pytest.fixture(scope="module")
def k1_bed() -> Iterator[tacker_bed.BedState]:
    """A Tacker of this module's own whose conductor can run Tacker's v1 driver class (see
    ``tacker_bed.start(k1=True)``: the driver monkey-patches the process it runs in, so
    never in the run's shared bed)."""
    state = tacker_bed.start(owner_pid=os.getpid(), k1=True)
    try:
        yield state
    finally:
        tacker_bed.stop(state)


@pytest.fixture(scope="module")
def k1_vnfd(k1_bed: tacker_bed.BedState) -> str:
    """The v1 package copy that names Tacker's v1 driver class, onboarded on the K1 bed."""
    return tacker_driver_v1.build_and_onboard_k1_package(k1_bed)


@pytest.fixture(scope="module")
def v1_tacker(k1_bed: tacker_bed.BedState) -> V1Tacker:
    return V1Tacker(k1_bed.url)


@pytest.fixture(scope="module")
def k8s_openstack_vim(k1_bed: tacker_bed.BedState, v1_tacker: V1Tacker, k8s_sim: SimProcess) -> str:
    """The hosts' simulated cloud as an OpenStack VIM (v1 instantiates on a registered
    VIM, and the driver reads the nodes' addresses from that cloud's Heat)."""
    return v1_tacker.register_openstack_vim(
        k1_bed, k8s_sim.auth_url, k8s_sim.openstack_settings(), unique_name("k1-openstack")
    )


def kubernetes_vims(tacker: V1Tacker) -> dict[str, dict[str, Any]]:
    """Tacker's Kubernetes VIMs by name (``GET /v1.0/vims``)."""
    return {v["name"]: v for v in tacker.vims() if v.get("type") == "kubernetes"}


def cnf_through_v1(
    state: tacker_bed.BedState, tacker: V1Tacker, hosts: TestBed, master: TestHost, vim_id: str
) -> str:
    """VNF-B (the v1 copy of the sample CNF) through Tacker v1's Kubernetes infra driver
    on the Kubernetes VIM ``vim_id``."""
    t0 = time.monotonic()
    vnfd = cnf.build_and_onboard(state, api="v1")
    onboarded = time.monotonic() - t0
    request = cnf.v1_instantiate_request(vim_id)
    took = cnf_round_trip(tacker, hosts, master, vnfd, "tacker-k1-cnf", request)
    return f"onboarding {onboarded:.1f} s, {took}"


def test_tackers_v1_driver_instantiates_simple_registers_its_vim_and_terminate_deletes_it(
    k1_bed: tacker_bed.BedState,
    v1_tacker: V1Tacker,
    k8s_openstack_vim: str,
    hosts: TestBed,
    k1_vnfd: str,
    machine_etc_hosts: str,
) -> None:
    master, workers = hosts.hosts[0], hosts.hosts[1:3]
    names = {master: tacker_driver.node_name("master", master)} | {
        w: tacker_driver.node_name("worker", w) for w in workers
    }
    with tacker_driver.prepared_hosts(hosts, [master], workers):
        inst = v1_tacker.create(k1_vnfd, unique_name("tacker-k1-simple"))
        vim_name = f"kubernetes_vim_{inst}"
        try:
            t0 = time.monotonic()
            occ = v1_tacker.wait_op(
                v1_tacker.start_op(
                    inst,
                    "instantiate",
                    {
                        "flavourId": "simple",
                        "vimConnectionInfo": v1_vim_connection_info(k8s_openstack_vim),
                        "extVirtualLinks": v1_ext_virtual_links(NETWORK_ID),
                        "additionalParams": tacker_driver_v1.k1_params(hosts),
                    },
                ),
                timeout=600,
            )
            elapsed = time.monotonic() - t0
            assert occ["operationState"] == "COMPLETED", occ.get("error")

            # Every node Ready on the real control plane, under Tacker's names.
            nodes = kubectl(hosts, master, "get", "nodes", "-o", "json")
            assert nodes_ready(nodes) == dict.fromkeys(names.values(), True)

            # The Kubernetes VIM the driver registered: the master's API server.
            vim = kubernetes_vims(v1_tacker).get(vim_name)
            assert vim is not None, sorted(kubernetes_vims(v1_tacker))
            assert vim["auth_url"] == f"https://{master.address}:6443", vim["auth_url"]
            assert vim["status"] in ("ACTIVE", "REACHABLE", "PENDING"), vim["status"]
            # ... and the instance's vimConnectionInfo names it.
            entries = [
                e
                for e in v1_tacker.show(inst).get("vimConnectionInfo") or ()
                if e.get("vimType") == "kubernetes"
            ]
            assert [e["vimId"] for e in entries] == [vim["id"]], entries
            print(f"Tacker's v1 driver: INSTANTIATE simple COMPLETED in {elapsed:.1f} s")

            # VNF-B through v1 on that VIM, as a v1 user deploys a CNF; then deleted,
            # before the cluster's TERMINATE deletes the VIM.
            took = cnf_through_v1(k1_bed, v1_tacker, hosts, master, vim["id"])
            print(f"VNF-B through v1 on its VIM: {took}")

            # TERMINATE: the driver's terminate_end deletes its VIM.
            occ = v1_tacker.wait_op(
                v1_tacker.start_op(inst, "terminate", {"terminationType": "FORCEFUL"}),
                timeout=180,
            )
            assert occ["operationState"] == "COMPLETED", occ.get("error")
            assert vim_name not in kubernetes_vims(v1_tacker)
        finally:
            terminate_and_delete(v1_tacker, inst)
