"""Seed 003's chain, as the seed writes it, with Tacker's hooks: the test plays the NFVO.

It instantiates VNF-A (the cluster package, its hooks wired and Tacker's conductor
pointed at a ``serve`` with ``hooks.token``) and, the moment Tacker reports VNF-A's op-occ
COMPLETED (no waiting for a MODIFY_INFO, no sleep), instantiates VNF-B (the CNF package)
with the ``vimConnectionInfo`` entry read from VNF-A. The cluster was built with the real
kubeadm 1.20.2 inside VNF-A's operation (``instantiate_end``), so VNF-B reaches COMPLETED
on the real control plane through Tacker's own Kubernetes infra driver.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster_fakes import host_params
from tests.k8s.full_loop import K8S_VIM_TYPE, tacker_k8s
from tests.tacker.helpers import hooks_pointed_at
from tests.testbed import tacker_bed
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import (
    NETWORK_ID,
    TackerClient,
    instantiate_request,
    unique_name,
)
from tests.testbed.tacker_api import terminate_and_delete as remove
from tests.testbed.tacker_serve import VIM_KEY, ServeProcess, serve_config, subscribed_serve
from tests.testbed.testhosts import TestBed

pytestmark = [pytest.mark.k8s, pytest.mark.tacker, pytest.mark.ssh, pytest.mark.timeout(1200)]

TOKEN = "k8s-chain-hook-token-5e0a"
CNF_PACKAGE = "cnf_deployment"
CNF_FILES = ["Files/kubernetes/deployment.yaml"]


@pytest.fixture(scope="module")
def hooked_serve(
    bed: tacker_bed.BedState,
    tacker: TackerClient,
    k8s_sim: SimProcess,
    loop_hosts: TestBed,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServeProcess]:
    """``serve`` with the hooks on, subscribed to Tacker, and Tacker's conductor pointed at
    it; at teardown the conductor's hook configuration is gone again."""
    config = {**serve_config(bed, k8s_sim, loop_hosts), "hooks": {"token": TOKEN}}
    tmp = tmp_path_factory.mktemp("serve-chain")
    with (
        subscribed_serve(tacker, tmp, config, timeout=60) as proc,
        hooks_pointed_at(bed, proc, TOKEN, timeout=900, poll_interval=0.5),
    ):
        yield proc


def test_vnf_b_is_instantiated_on_vnf_a_the_moment_vnf_a_is_completed(
    bed: tacker_bed.BedState,
    tacker: TackerClient,
    k8s_sim: SimProcess,
    loop_hosts: TestBed,
    hooked_serve: ServeProcess,
) -> None:
    assert bed.vnfd_id
    vnfd_b = tacker_bed.build_and_onboard(bed, CNF_PACKAGE)
    master = loop_hosts.hosts[0]
    a = tacker.create(bed.vnfd_id, unique_name("chain-vnf-a"))
    b = ""
    try:
        params = host_params(loop_hosts)
        t0 = time.monotonic()
        occ_a = tacker.start_op(
            a,
            "instantiate",
            instantiate_request(k8s_sim.vim_connection_info(), params, NETWORK_ID),
        )
        done_a = tacker.wait_op(occ_a, timeout=900)
        took_a = time.monotonic() - t0
        assert done_a["operationState"] == "COMPLETED", done_a.get("error")

        # At once: VNF-A holds the cluster's entry (the API shows it without the token; the
        # NFVO, Tacker's admin here, reads the token from Tacker's store). No MODIFY_INFO.
        shown = tacker.show(a)["vimConnectionInfo"][VIM_KEY]
        assert shown["vimType"] == K8S_VIM_TYPE
        assert shown["interfaceInfo"]["endpoint"] == f"https://{master.address}:6443"
        vim: dict[str, Any] = (tacker_bed.stored_vim_connection_info(bed, a) or {})[VIM_KEY]
        t1 = time.monotonic()
        b = tacker.create(vnfd_b, unique_name("chain-vnf-b"))
        occ_b = tacker.start_op(
            b,
            "instantiate",
            {
                "flavourId": "simple",
                "vimConnectionInfo": {VIM_KEY: vim},
                "additionalParams": {
                    "lcm-kubernetes-def-files": CNF_FILES,
                    "namespace": "default",
                },
            },
        )
        done_b = tacker.wait_op(occ_b, timeout=300)  # Tacker's driver looks every 10 s
        assert done_b["operationState"] == "COMPLETED", done_b.get("error")
        took_b = time.monotonic() - t1
        assert not [
            o
            for o in tacker.op_occs()
            if o["vnfInstanceId"] == a and o["operation"] == "MODIFY_INFO"
        ]
        # Tacker's own Kubernetes client, through VNF-A's entry: every node Ready.
        nodes = tacker_k8s(vim).get("nodes") or {}
        assert len(nodes) == 3 and all(nodes.values()), nodes
        print(
            f"seed 003 chain: VNF-A INSTANTIATE 202 -> COMPLETED with hooks {took_a:.1f} s "
            f"(the cluster built inside it), then VNF-B 202 -> COMPLETED {took_b:.1f} s"
        )
    finally:
        if b:
            remove(tacker, b)
        remove(tacker, a)
