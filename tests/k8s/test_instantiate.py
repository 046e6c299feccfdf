"""The INSTANTIATE handler through a real Service on a real Kubernetes control plane.

Tacker and OpenStack are the in-memory fakes of ``tests.cluster_fakes`` (their
VNFC addresses are the test hosts'); SSH, ``install_k8s_cluster.sh``, kubeadm,
kubectl, etcd and the control plane are real, the kubelet is the stand-in. The
simple flavour: one master, two workers. What the handler writes back must work
against the real API server: its CA verifies the server and its bearer token (a
real service-account token) lists every node, Ready.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from subscriber.config import ClusterSettings
from tests.cluster_fakes import cluster_service, cluster_vnf, host_params
from tests.k8s.helpers import SCRIPT_ENV, api_get, instantiate_and_stop, ssh_settings
from tests.testbed.testhosts import TestBed, nodes_ready

pytestmark = [pytest.mark.k8s, pytest.mark.asyncio]

# The real tools' details come through settings, as an operator would give them.
CLUSTER = ClusterSettings(script_env=SCRIPT_ENV, token_wait_timeout=60.0, install_timeout=300.0)


def octet(address: str) -> str:
    return address.rsplit(".", 1)[1]


async def test_instantiate_builds_a_real_cluster_and_writes_back_working_access(
    hosts: TestBed, tmp_path: Path
) -> None:
    master, workers = hosts.hosts[0], hosts.hosts[1:3]
    # Masters as root with a key, workers as a sudo user with a password (Tacker's way).
    params = host_params(hosts)
    tacker, openstack, inst, occ = cluster_vnf(
        [master.address], [w.address for w in workers], params=params
    )
    db = tmp_path / "lccn.db"
    svc = await cluster_service(
        f"sqlite+aiosqlite:///{db}", tacker, openstack, CLUSTER, ssh=ssh_settings(hosts, 120.0)
    )
    elapsed = await instantiate_and_stop(svc, inst, occ)

    ((wb_inst, access, api),) = tacker.write_backs
    endpoint = f"https://{master.address}:6443"
    assert (wb_inst, api, access.endpoint) == (inst, "v2", endpoint)
    ca_file = hosts.private_dir(master, "/etc/kubernetes") / "pki" / "ca.crt"
    assert access.ssl_ca_cert == ca_file.read_text()
    token = access.bearer_token.get_secret_value()

    # The token is a real service-account token the API server accepts (RBAC included).
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sub"] == "system:serviceaccount:default:default"
    status, nodes = api_get(endpoint, "/api/v1/nodes", ca_pem=access.ssl_ca_cert, token=token)
    assert status == 200, nodes
    expected = {f"master{octet(master.address)}", *(f"worker{octet(w.address)}" for w in workers)}
    assert nodes_ready(nodes) == dict.fromkeys(expected, True)
    # ... and the server really checks: no token, no nodes.
    status, _ = api_get(endpoint, "/api/v1/nodes", ca_pem=access.ssl_ca_cert, token=None)
    assert status in (401, 403)
    status, _ = api_get(
        endpoint, "/api/v1/nodes", ca_pem=access.ssl_ca_cert, token=token[:-4] + "AAAA"
    )
    assert status == 401

    data = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    assert token.encode() not in data
    assert hosts.password is not None and hosts.password.encode() not in data
    print(f"INSTANTIATE on a real control plane: {elapsed:.1f} s")
