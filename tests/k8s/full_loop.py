"""The full loop's parts, shared by its simple and complex (HA) tests: ``serve`` as a
subprocess on the ``k8s`` hosts, VNF-A instantiated through the real Tacker, and Tacker's
own Kubernetes client asked through the ``vimConnectionInfo`` serve wrote back.

``loop_hosts`` and ``serve`` are module-scoped fixtures (``tests/k8s/conftest.py``
exposes them): each test module gets empty hosts and a ``serve`` of its own.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster_fakes import host_params
from tests.testbed import tacker_bed, testhosts
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import (
    NETWORK_ID,
    TackerClient,
    instantiate_request,
    terminate_and_delete,
    unique_name,
    wait_for,
)
from tests.testbed.tacker_serve import VIM_KEY, ServeProcess, serve_config, subscribed_serve
from tests.testbed.testhosts import TestBed

__all__ = [
    "K8S_VIM_TYPE",
    "ClusterVnf",
    "handled",
    "instantiate_cluster",
    "loop_hosts",
    "octet",
    "serve",
    "tacker_k8s",
]

K8S_VIM_TYPE = "ETSINFV.KUBERNETES.V_1"
PROBE = Path(__file__).with_name("tacker_k8s_client.py")


@dataclass
class ClusterVnf:
    """VNF-A once serve has built its cluster and written ``vimConnectionInfo`` back."""

    inst: str
    shown: dict[str, Any]  # GET vnf_instances/{id} (credentials hidden)
    stored: dict[str, Any]  # our vimConnectionInfo entry as Tacker stored it
    masters: list[testhosts.TestHost]  # the main master first
    workers: list[testhosts.TestHost]
    timings: dict[str, float]

    @property
    def master(self) -> testhosts.TestHost:
        return self.masters[0]


@pytest.fixture(scope="module")
def loop_hosts(k8s_hosts: TestBed) -> Iterator[TestBed]:
    """The k8s hosts, empty before the module and again after it."""
    testhosts.reset_cluster(k8s_hosts)
    yield k8s_hosts
    testhosts.reset_cluster(k8s_hosts)
    for host in k8s_hosts.hosts:  # the cluster flows rename the hosts
        subprocess.run(["nsenter", "-t", str(host.pid), "-u", "hostname", host.name], check=False)


@pytest.fixture(scope="module")
def serve(
    bed: tacker_bed.BedState,
    tacker: TackerClient,
    k8s_sim: SimProcess,
    loop_hosts: TestBed,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServeProcess]:
    """``lccn-subscriber serve`` as a subprocess, subscribed to Tacker by itself."""
    config = serve_config(bed, k8s_sim, loop_hosts)
    with subscribed_serve(tacker, tmp_path_factory.mktemp("serve-k8s"), config, timeout=60) as p:
        yield p


def handled(serve: ServeProcess, occ: str, *, timeout: float = 600.0) -> dict[str, Any]:
    """serve's COMPLETED event of ``occ`` (with its jobs), once its job is done."""

    def done() -> dict[str, Any] | None:
        for event in serve.events():
            if event["vnfLcmOpOccId"] == occ and event["operationState"] == "COMPLETED":
                if event["status"] == "failed":
                    detail = serve.event(event["id"])
                    raise AssertionError(f"serve's job failed: {detail['jobs']}")
                return serve.event(event["id"]) if event["status"] == "done" else None
        return None

    return wait_for(done, timeout=timeout, interval=2.0, what=f"serve's job of {occ}")  # type: ignore[no-any-return]


def cluster_fixture(name: str, flavour: str) -> Any:
    """A module fixture ``name``: VNF-A of ``flavour``, instantiated by Tacker with the
    cluster package and built by the module's ``serve``; terminated and deleted after."""

    def cluster(
        bed: tacker_bed.BedState,
        tacker: TackerClient,
        k8s_sim: SimProcess,
        loop_hosts: TestBed,
        serve: ServeProcess,
    ) -> Iterator[ClusterVnf]:
        with instantiate_cluster(flavour, bed, tacker, k8s_sim, loop_hosts, serve) as vnf:
            yield vnf

    cluster.__doc__ = f"VNF-A, {flavour} flavour: instantiated by Tacker, built by serve."
    return pytest.fixture(scope="module", name=name)(cluster)


def tacker_k8s(vim: dict[str, Any], deployment: str | None = None) -> dict[str, Any]:
    """Ask the cluster through ``vim`` with Tacker's own Kubernetes client (its venv)."""
    out = subprocess.run(
        [str(tacker_bed.tacker_venv() / "bin" / "python"), str(PROBE)],
        input=json.dumps({"vim": vim, "deployment": deployment}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def octet(address: str) -> str:
    return address.rsplit(".", 1)[1]


@contextlib.contextmanager
def instantiate_cluster(
    flavour: str,
    bed: tacker_bed.BedState,
    tacker: TackerClient,
    sim: SimProcess,
    hosts: TestBed,
    serve: ServeProcess,
) -> Iterator[ClusterVnf]:
    """VNF-A: Tacker instantiates the cluster package in ``flavour``; serve builds the
    cluster. The simulator hands the hosts' addresses out in order, masters first (one
    master in the simple flavour, three in the complex one, then two workers).
    TERMINATE and DELETE on exit."""
    assert bed.vnfd_id
    ha = flavour == "complex"
    n_masters = 3 if ha else 1
    masters, workers = hosts.hosts[:n_masters], hosts.hosts[n_masters : n_masters + 2]
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    inst = tacker.create(bed.vnfd_id, unique_name(f"k8s-vnf-a-{flavour}"))
    try:
        # Masters log in as root with a key, workers as a sudo user with a password.
        params = host_params(hosts, ha=ha)
        occ = tacker.run_op(
            inst,
            "instantiate",
            instantiate_request(sim.vim_connection_info(), params, NETWORK_ID, flavour=flavour),
        )
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        timings["VNF-A INSTANTIATE in Tacker"] = time.monotonic() - t0
        event = handled(serve, occ["id"])
        timings["VNF-A cluster built by serve"] = time.monotonic() - t0
        (job,) = event["jobs"]
        assert job["handler"] == "cluster-instantiate"
        assert all(s["status"] in ("done", "skipped") for s in job["steps"]), job["steps"]
        shown = tacker.show(inst)
        stored = tacker_bed.stored_vim_connection_info(bed, inst) or {}
        yield ClusterVnf(inst, shown, stored.get(VIM_KEY, {}), masters, workers, timings)
    finally:
        terminate_and_delete(tacker, inst)
