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

import asyncio
import base64
import json
import time

import pytest
from pydantic import SecretStr

from subscriber import tacker as our_tacker
from subscriber.config import TackerSettings
from subscriber.kernel.ports import KubernetesAccess
from tests.k8s.full_loop import (
    K8S_VIM_TYPE,
    ClusterVnf,
    cluster_fixture,
    handled,
    octet,
    tacker_k8s,
)
from tests.k8s.helpers import api_get
from tests.testbed import tacker_bed
from tests.testbed.openstack_sim.control import SimControl
from tests.testbed.tacker_api import TackerClient, terminate_and_delete, unique_name, wait_for
from tests.testbed.tacker_serve import VIM_KEY, ServeProcess
from tests.testbed.testhosts import TestBed

pytestmark = [pytest.mark.k8s, pytest.mark.tacker, pytest.mark.ssh, pytest.mark.timeout(900)]

CNF_PACKAGE = "cnf_deployment"
CNF_FILES = ["Files/kubernetes/deployment.yaml"]
DEPLOYMENT = "lccn-web"  # its metadata.name, and the VDU's properties.name


# VNF-A, simple flavour: Tacker instantiates the cluster package; serve builds it.
cluster_vnf = cluster_fixture("cluster_vnf", "simple")


def test_full_loop_serve_builds_the_cluster_and_its_vim_lists_every_node_ready(
    cluster_vnf: ClusterVnf, loop_hosts: TestBed, serve: ServeProcess
) -> None:
    vnf = cluster_vnf
    endpoint = f"https://{vnf.master.address}:6443"
    ca = (loop_hosts.private_dir(vnf.master, "/etc/kubernetes") / "pki" / "ca.crt").read_text()

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
    assert loop_hosts.password is not None
    kept = b"".join(p.read_bytes() for p in serve.tmp.glob("lccn.db*")) + serve.log.read_bytes()
    assert token.encode() not in kept
    assert loop_hosts.password.encode() not in kept
    print(", ".join(f"{k} {v:.1f} s" for k, v in vnf.timings.items()))


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
    # serve heard VNF-B through the same subscription: Tacker confirms the notification,
    # and a CNF is not a cluster of VMs, so its cluster job ends done at the parameters
    # step, and nothing is filed as failed.
    event = handled(serve, occ["id"], timeout=60)
    (job,) = event["jobs"]
    assert job["handler"] == "cluster-instantiate"
    assert [(s["name"], s["status"]) for s in job["steps"]] == [
        ("confirm", "done"),
        ("load-params", "skipped"),
    ], job["steps"]
    assert "deployed on Kubernetes" in job["steps"][1]["output"]

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


def test_tacker_registers_the_cluster_as_a_kubernetes_vim_keyed_in_barbican(
    cluster_vnf: ClusterVnf, bed: tacker_bed.BedState
) -> None:
    """The VIM of seed 000 through the real Tacker: our ``register_vim`` posts the cluster's
    access; Tacker's Kubernetes VIM driver checks it against the real API server (its
    namespaces become the VIM's regions) and keeps the Fernet key of its encrypted token
    in the bed's Barbican; ``delete_vim`` removes the VIM and Tacker deletes the key."""
    vnf = cluster_vnf
    access = KubernetesAccess(
        endpoint=vnf.stored["interfaceInfo"]["endpoint"],
        ssl_ca_cert=vnf.stored["interfaceInfo"]["ssl_ca_cert"],
        bearer_token=SecretStr(vnf.stored["accessInfo"]["bearer_token"]),
    )
    name = unique_name("vim")
    keys = SimControl(bed.sim_url)

    async def register() -> str | None:
        async with our_tacker.TackerClient(
            TackerSettings(**bed.tacker_section(register_vim=True))
        ) as c:
            return await c.register_vim(name, access, owner=vnf.inst)

    async def delete() -> list[str]:
        async with our_tacker.TackerClient(
            TackerSettings(**bed.tacker_section(register_vim=True))
        ) as c:
            return await c.delete_vim(None, owner=vnf.inst)

    before = {s["id"] for s in keys.state()["secrets"]}
    vim_id = asyncio.run(register())
    assert vim_id
    status, _, shown = tacker_bed.request("GET", f"{bed.url}/v1.0/vims/{vim_id}")
    assert status == 200, shown
    vim = shown["vim"]
    assert vim["type"] == "kubernetes" and vim["auth_url"] == access.endpoint
    assert {"default", "kube-system"} <= set(vim["placement_attr"]["regions"])
    assert vim["status"] == "ACTIVE" and vim["auth_cred"]["key_type"] == "barbican_key"
    assert access.bearer_token.get_secret_value() not in json.dumps(shown)
    [key] = {s["id"] for s in keys.state()["secrets"]} - before  # the API masks its id

    assert asyncio.run(delete()) == [name]
    # (Tacker 16.0.0 answers a GET of a deleted VIM with 500, so the list is read.)
    status, _, listed = tacker_bed.request("GET", f"{bed.url}/v1.0/vims")
    assert status == 200 and vim_id not in [v["id"] for v in listed["vims"]]
    assert key not in {s["id"] for s in keys.state()["secrets"]}
