"""Seed 000 on a real control plane, through Tacker's v1 API: the Kubernetes VIM as the seed
shows it.

The real Tacker 16.0.0 INSTANTIATEs the v1 package (BaseHOT, LCM operation user data,
seed 000's parameters) on the simulated OpenStack, registered as an OpenStack VIM, whose
VNFC ports carry the ``k8s`` hosts' addresses. ``serve`` (a subprocess, ``api_version:
v1``, VIM registration at its v1 default: on) builds the cluster with the real kubeadm
1.20.2 and registers it as a Kubernetes VIM: Tacker's VIM driver reaches the real API
server with the token and CA (the cluster's namespaces become the VIM's regions) and keeps
its Fernet key in the bed's Barbican. The instance's ``vimConnectionInfo`` gets the
seed's entry (``vimType: kubernetes``, the VIM, ``accessInfo.authUrl``). TERMINATE
deletes the VIM, and Tacker its key.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.day2_v1 import V1Loop
from tests.testbed import tacker_bed
from tests.testbed.openstack_sim.control import SimControl
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_serve import ServeProcess, serve_config, subscribed_serve
from tests.testbed.tacker_v1 import V1Tacker
from tests.testbed.testhosts import TestBed

pytestmark = [pytest.mark.k8s, pytest.mark.tacker, pytest.mark.ssh, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def v1_tacker(bed: tacker_bed.BedState) -> V1Tacker:
    return V1Tacker(bed.url)


@pytest.fixture(scope="module")
def v1_serve(
    bed: tacker_bed.BedState,
    v1_tacker: V1Tacker,
    k8s_sim: SimProcess,
    loop_hosts: TestBed,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServeProcess]:
    config = serve_config(bed, k8s_sim, loop_hosts)
    config["tacker"] = {**config["tacker"], "api_version": "v1"}  # register_vim: v1 default
    directory = tmp_path_factory.mktemp("serve-k8s-v1")
    with subscribed_serve(v1_tacker, directory, config, timeout=60) as proc:
        yield proc


@pytest.fixture
def loop(
    bed: tacker_bed.BedState,
    v1_tacker: V1Tacker,
    k8s_sim: SimProcess,
    loop_hosts: TestBed,
    v1_serve: ServeProcess,
) -> Iterator[V1Loop]:
    vim = v1_tacker.register_openstack_vim(
        bed, k8s_sim.auth_url, k8s_sim.openstack_settings(), f"k8s-{uuid.uuid4().hex[:8]}"
    )
    lp = V1Loop(v1_tacker, k8s_sim, loop_hosts, v1_serve, vim)
    try:
        yield lp
    finally:
        lp.terminate()


def kubernetes_vims(bed: tacker_bed.BedState) -> dict[str, dict[str, Any]]:
    status, _, body = tacker_bed.request("GET", f"{bed.url}/v1.0/vims")
    assert status == 200, body
    return {v["name"]: v for v in body["vims"] if v["type"] == "kubernetes"}


def test_v1_instantiate_registers_the_seeds_kubernetes_vim_and_terminate_deletes_it(
    bed: tacker_bed.BedState, v1_vnfd: str, loop_hosts: TestBed, loop: V1Loop
) -> None:
    keys = SimControl(bed.sim_url)
    before = {s["id"] for s in keys.state()["secrets"]}
    shown = loop.instantiate(v1_vnfd, "simple")
    steps = V1Loop.steps(shown)
    assert steps["register-vim"]["status"] == "done", steps["register-vim"]
    master = loop_hosts.hosts[0]
    endpoint = f"https://{master.address}:6443"

    name = f"kubernetes_vim_{loop.inst}"
    vim = kubernetes_vims(bed)[name]
    assert vim["auth_url"] == endpoint
    assert {"default", "kube-system"} <= set(vim["placement_attr"]["regions"])
    assert vim["status"] == "ACTIVE" and vim["auth_cred"]["key_type"] == "barbican_key"
    [key] = {s["id"] for s in keys.state()["secrets"]} - before  # the API masks its id

    # What seed 000's `openstack vnflcm show` shows: the VIM and its URL, no secret.
    instance = loop.v1.show(loop.inst)
    entry = instance["vimConnectionInfo"][-1]
    assert entry["vimType"] == "kubernetes" and entry["vimId"] == vim["id"]
    assert entry["accessInfo"] == {"authUrl": endpoint}
    assert "BEGIN CERTIFICATE" not in str(instance)

    occ = loop.op("terminate", {"terminationType": "FORCEFUL"})
    loop.instantiated = False
    steps = V1Loop.steps(loop.handled(occ["id"]))
    assert steps["delete-vim"]["status"] == "done", steps
    assert name not in kubernetes_vims(bed)
    assert key not in {s["id"] for s in keys.state()["secrets"]}
