"""The seeds' two-VNF flow with nothing stood in but the kubelet and OpenStack.

VNF-A, the cluster: the real Tacker 16.0.0 (the run's one bed) INSTANTIATEs our sample
package (``scripts/vnf_package/kubernetes_cluster``, simple flavour) on the simulated
OpenStack, whose VNFC ports carry the ``k8s`` test hosts' addresses; ``lccn-subscriber
serve`` (a subprocess, subscribed to Tacker by itself) hears the notifications, builds
the cluster over SSH with the real kubeadm 1.20.2 and PATCHes ``vimConnectionInfo``
back. The entry is read back from Tacker's instance (the API for endpoint and CA, the
stored instance for the bearer token, which the API hides) and Tacker's own
Kubernetes client (in Tacker's venv) lists every node Ready through it.

VNF-B, a CNF on that cluster: our small package (``scripts/vnf_package/cnf_deployment``,
one Deployment of two replicas) is instantiated by the real Tacker v2 Kubernetes infra
driver with that ``vimConnectionInfo``; Tacker reaches COMPLETED once the Deployment is
Ready in the real API server (the kubelet stand-ins mark its pods Running and Ready),
and TERMINATE removes it.

The tests are synchronous: Tacker, ``serve``, the simulator and the control plane are
processes of their own, driven over HTTP, SSH and ``serve``'s CLI.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster_fakes import k8s_params
from tests.k8s.conftest import restore_hostnames
from tests.k8s.helpers import SCRIPT_ENV, api_get
from tests.openstack_sim.process import SimProcess
from tests.tacker.conftest import NETWORK_ID
from tests.tacker.helpers import (
    ServeProcess,
    TackerClient,
    ext_virtual_links,
    unique_name,
    wait_for,
)
from tests.testbed import tacker_bed, testhosts
from tests.testbed.testhosts import TestBed

pytestmark = [pytest.mark.k8s, pytest.mark.tacker, pytest.mark.ssh, pytest.mark.timeout(900)]

K8S_VIM_TYPE = "ETSINFV.KUBERNETES.V_1"
VIM_KEY = "k8s"  # serve's tacker.vim_key
CNF_PACKAGE = "cnf_deployment"
CNF_FILES = ["Files/kubernetes/deployment.yaml"]
DEPLOYMENT = "lccn-web"  # its metadata.name, and the VDU's properties.name
PROBE = Path(__file__).with_name("tacker_k8s_client.py")
TIMINGS: dict[str, float] = {}


@dataclass
class ClusterVnf:
    """VNF-A once serve has built its cluster and written ``vimConnectionInfo`` back."""

    inst: str
    shown: dict[str, Any]  # GET vnf_instances/{id} (credentials hidden)
    stored: dict[str, Any]  # our vimConnectionInfo entry as Tacker stored it
    master: testhosts.TestHost
    workers: list[testhosts.TestHost]


@pytest.fixture(scope="module")
def hosts(k8s_hosts: TestBed) -> Iterator[TestBed]:
    """The k8s hosts, empty before the module and again after it."""
    testhosts.reset_cluster(k8s_hosts)
    yield k8s_hosts
    testhosts.reset_cluster(k8s_hosts)
    restore_hostnames(k8s_hosts)


def serve_config(bed: tacker_bed.BedState, sim: SimProcess, hosts: TestBed) -> dict[str, Any]:
    """serve's settings: noauth Tacker (subscribes on start), the simulator's Keystone,
    the hosts' SSH keys, and the real tools' details through ``cluster``."""
    return {
        "dispatch": {"rescan_interval": 0.5, "backoff_initial": 0.5, "max_attempts": 3},
        "tacker": {
            "endpoint": bed.url,
            "noauth_user_id": tacker_bed.USER_ID,
            "noauth_project_id": tacker_bed.PROJECT_ID,
            "retry_attempts": 20,
            "retry_initial": 0.1,
            "retry_max": 1.0,
            "op_poll_interval": 0.2,
            "subscribe_on_start": True,
            "vim_key": VIM_KEY,
        },
        "openstack": sim.openstack_settings(),
        "ssh": {
            "known_hosts": str(hosts.known_hosts),
            "client_keys": [str(hosts.client_key)],
            "connect_timeout": 5.0,
            "command_timeout": 120.0,
        },
        "cluster": {
            "handlers": "on",
            "script_env": SCRIPT_ENV,
            "token_wait_timeout": 60.0,
            "install_timeout": 300.0,
        },
    }


def subscriptions_to(tacker: TackerClient, url: str) -> list[str]:
    status, _, subs = tacker.call("GET", "/vnflcm/v2/subscriptions")
    assert status == 200, subs
    return [s["id"] for s in subs if s.get("callbackUri") == url]


@pytest.fixture(scope="module")
def serve(
    bed: tacker_bed.BedState,
    tacker: TackerClient,
    k8s_sim: SimProcess,
    hosts: TestBed,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServeProcess]:
    """``lccn-subscriber serve`` as a subprocess, subscribed to Tacker by itself."""
    proc = ServeProcess(tmp_path_factory.mktemp("serve-k8s"), serve_config(bed, k8s_sim, hosts))
    proc.start()
    try:
        wait_for(
            lambda: subscriptions_to(tacker, proc.callback_url),
            timeout=60,
            interval=0.5,
            what="serve's own subscription",
        )
        yield proc
    finally:
        proc.stop()
        for sub in subscriptions_to(tacker, proc.callback_url):
            tacker.unsubscribe(sub)


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


def terminate_and_delete(tacker: TackerClient, inst: str) -> None:
    """Best effort at teardown: TERMINATE if instantiated, then DELETE."""
    with contextlib.suppress(AssertionError):
        if tacker.show(inst).get("instantiationState") == "INSTANTIATED":
            tacker.run_op(inst, "terminate", {"terminationType": "FORCEFUL"})
    with contextlib.suppress(AssertionError):
        tacker.delete(inst)


@pytest.fixture(scope="module")
def cluster_vnf(
    bed: tacker_bed.BedState,
    tacker: TackerClient,
    k8s_sim: SimProcess,
    hosts: TestBed,
    serve: ServeProcess,
) -> Iterator[ClusterVnf]:
    """VNF-A: Tacker instantiates the cluster package; serve builds the cluster."""
    assert bed.vnfd_id
    master, workers = hosts.hosts[0], hosts.hosts[1:3]
    t0 = time.monotonic()
    inst = tacker.create(bed.vnfd_id, unique_name("k8s-vnf-a"))
    try:
        # Masters log in as root with a key, workers as a sudo user with a password.
        params = k8s_params(
            master_user="root",
            worker_user=hosts.user or "root",
            key=str(hosts.client_key),
            password=hosts.password,
        )
        occ = tacker.run_op(
            inst,
            "instantiate",
            {
                "flavourId": "simple",
                "vimConnectionInfo": k8s_sim.vim_connection_info(),
                "extVirtualLinks": ext_virtual_links(NETWORK_ID),
                "additionalParams": params,
            },
        )
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        TIMINGS["VNF-A INSTANTIATE in Tacker"] = time.monotonic() - t0
        event = handled(serve, occ["id"])
        TIMINGS["VNF-A cluster built by serve"] = time.monotonic() - t0
        (job,) = event["jobs"]
        assert job["handler"] == "cluster-instantiate"
        assert all(s["status"] in ("done", "skipped") for s in job["steps"]), job["steps"]
        shown = tacker.show(inst)
        stored = tacker_bed.stored_vim_connection_info(bed, inst) or {}
        yield ClusterVnf(inst, shown, stored.get(VIM_KEY, {}), master, workers)
    finally:
        terminate_and_delete(tacker, inst)


def test_full_loop_serve_builds_the_cluster_and_its_vim_lists_every_node_ready(
    cluster_vnf: ClusterVnf, hosts: TestBed, serve: ServeProcess
) -> None:
    vnf = cluster_vnf
    endpoint = f"https://{vnf.master.address}:6443"
    ca = (hosts.private_dir(vnf.master, "/etc/kubernetes") / "pki" / "ca.crt").read_text()

    # What Tacker shows: the instance's own VIM untouched, ours beside it, no token.
    vci = vnf.shown["vimConnectionInfo"]
    assert "vim1" in vci
    entry = vci[VIM_KEY]
    assert entry["vimType"] == K8S_VIM_TYPE
    assert entry["interfaceInfo"] == {"endpoint": endpoint, "ssl_ca_cert": ca}
    assert "bearer_token" not in json.dumps(entry)
    # What Tacker stored (and its infra drivers use): the same, plus the token.
    assert vnf.stored["interfaceInfo"] == entry["interfaceInfo"]
    assert vnf.stored["vimType"] == K8S_VIM_TYPE
    token = vnf.stored["accessInfo"]["bearer_token"]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sub"] == "system:serviceaccount:default:default"

    # Tacker's own Kubernetes client, made from that entry, verifies the server with
    # the CA and lists every node, Ready.
    seen = tacker_k8s(vnf.stored)
    assert seen.get("verify_ssl") is True, seen
    expected = {
        f"master{octet(vnf.master.address)}",
        *(f"worker{octet(w.address)}" for w in vnf.workers),
    }
    assert seen.get("nodes") == dict.fromkeys(expected, True), seen
    # ... and the API server does check: without the token, no nodes.
    status, _ = api_get(endpoint, "/api/v1/nodes", ca_pem=ca, token=None)
    assert status in (401, 403)

    # No secret in serve's store or its log.
    assert hosts.password is not None
    kept = b"".join(p.read_bytes() for p in serve.tmp.glob("lccn.db*")) + serve.log.read_bytes()
    assert token.encode() not in kept
    assert hosts.password.encode() not in kept
    print(", ".join(f"{k} {v:.1f} s" for k, v in TIMINGS.items()))


def test_vnf_b_tacker_deploys_a_cnf_on_the_cluster_and_terminate_removes_it(
    cluster_vnf: ClusterVnf, bed: tacker_bed.BedState, tacker: TackerClient, serve: ServeProcess
) -> None:
    vim = cluster_vnf.stored
    assert vim.get("accessInfo", {}).get("bearer_token"), "VNF-A has no usable vimConnectionInfo"
    ca = vim["interfaceInfo"]["ssl_ca_cert"]
    endpoint = vim["interfaceInfo"]["endpoint"]
    token = vim["accessInfo"]["bearer_token"]
    path = f"/apis/apps/v1/namespaces/default/deployments/{DEPLOYMENT}"

    t0 = time.monotonic()
    vnfd_b = tacker_bed.build_and_onboard(bed, CNF_PACKAGE)
    assert bed.vnfd_id != vnfd_b  # the bed's own package is still the cluster's
    inst = tacker.create(vnfd_b, unique_name("k8s-vnf-b"))
    try:
        request = {
            "flavourId": "simple",
            "vimConnectionInfo": {VIM_KEY: vim},
            "additionalParams": {"lcm-kubernetes-def-files": CNF_FILES, "namespace": "default"},
        }
        # Tacker's driver looks at the resources every 10 s: a loaded machine needs time.
        occ = tacker.wait_op(tacker.start_op(inst, "instantiate", request), timeout=300)
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        t_instantiate = time.monotonic() - t0

        # The Deployment is Ready in the real API server, its pods on the workers.
        status, deployment = api_get(endpoint, path, ca_pem=ca, token=token)
        assert status == 200, deployment
        assert deployment["spec"]["replicas"] == 2
        assert deployment["status"].get("readyReplicas") == 2, deployment["status"]
        labels = deployment["metadata"]["labels"]
        assert labels.get("tacker_vnf_instance_id") == inst
        status, pods = api_get(
            endpoint,
            "/api/v1/namespaces/default/pods?labelSelector=app%3Dlccn-web",
            ca_pem=ca,
            token=token,
        )
        assert status == 200, pods
        running = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods["items"]}
        assert len(running) == 2, running
        assert all(str(node).startswith("worker") for node in running.values()), running
        # Tacker made a VNFC of each pod.
        shown = tacker.show(inst)
        vnfcs = shown["instantiatedVnfInfo"]["vnfcResourceInfo"]
        assert {v["computeResource"]["resourceId"] for v in vnfcs} == set(running)
        assert {v["vduId"] for v in vnfcs} == {"web"}

        # TERMINATE removes the Deployment (and its pods) from the cluster.
        t1 = time.monotonic()
        term = tacker.wait_op(
            tacker.start_op(inst, "terminate", {"terminationType": "FORCEFUL"}), timeout=300
        )
        assert term["operationState"] == "COMPLETED", term.get("error")
        t_terminate = time.monotonic() - t1
        status, _ = api_get(endpoint, path, ca_pem=ca, token=token)
        assert status == 404
        assert tacker_k8s(vim, f"default/{DEPLOYMENT}").get("deployment") is None
        assert tacker.show(inst)["instantiationState"] == "NOT_INSTANTIATED"
    finally:
        terminate_and_delete(tacker, inst)

    # The cluster itself is untouched: every node still Ready through VNF-A's VIM.
    assert all(tacker_k8s(vim).get("nodes", {}).values())
    # serve heard VNF-B through the same subscription: a CNF is not a cluster of VMs, so
    # its cluster jobs end done with every step skipped, and nothing is filed as failed.
    event = handled(serve, occ["id"], timeout=60)
    (job,) = event["jobs"]
    assert job["handler"] == "cluster-instantiate"
    assert {s["status"] for s in job["steps"]} == {"skipped"}, job["steps"]
    assert "deployed on Kubernetes" in job["steps"][0]["output"]

    def settled() -> dict[tuple[str, str], str] | None:
        events = [e for e in serve.events() if e["vnfInstanceId"] == inst]
        if any(e["status"] in ("pending", "running", "retry") for e in events):
            return None
        return {
            (e["operation"], e["operationState"]): e["status"] for e in events if e["operation"]
        }

    statuses = wait_for(settled, timeout=60, interval=1.0, what="serve to settle VNF-B's events")
    assert "failed" not in statuses.values(), statuses
    assert statuses[("INSTANTIATE", "STARTING")] == "done", statuses
    print(
        f"VNF-B: INSTANTIATE {t_instantiate:.1f} s (with onboarding), TERMINATE {t_terminate:.1f} s"
    )
