"""``cluster_fip_name`` on a real control plane: the endpoint written back is the floating IP,
and a client that checks the CA written with it gets through.

The floating IP is a second address of the master's host (the bed's block's address no
host answers on, added to the master's interface for this test), as Neutron's NAT would
deliver it; the in-memory OpenStack gives it as the floating IP of the master's
``fip_CP`` port. INSTANTIATE runs through a real Service, SSH, ``install_k8s_cluster.sh``,
kubeadm, the API server and etcd (the kubelet is the stand-in). Then the real ``kubectl``
(a kubeconfig of the written CA and token, ``--server https://<floating IP>:6443``) and
Tacker's own Kubernetes client (from the ``vimConnectionInfo`` entry, in Tacker's venv)
list the nodes through the floating IP: both verify the API server's certificate, which
holds the address as a SAN. The cluster's kubeadm-config holds it too, which is where a
master that joins or is healed later takes its own certificate's SANs from.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.utils import CryptographyDeprecationWarning

from subscriber.config import ClusterSettings
from subscriber.kernel.ports import PortAddresses
from testbed import testhosts
from testbed.testhosts import TestBed
from tests.cluster_fakes import cluster_service, cluster_vnf, k8s_params
from tests.conftest import callback_url, wait_settled
from tests.factories import op_occ
from tests.k8s.full_loop import tacker_k8s
from tests.k8s.helpers import SCRIPT_ENV, ssh_settings

pytestmark = [pytest.mark.k8s, pytest.mark.asyncio]

CLUSTER = ClusterSettings(script_env=SCRIPT_ENV, token_wait_timeout=60.0, install_timeout=300.0)
FIP_CP = "fip_CP"


@pytest.fixture
def floating_ip(hosts: TestBed) -> Iterator[str]:
    """The bed's unused address as a second address of the master's host."""
    master, fip = hosts.hosts[0], hosts.unused_address
    ip = ["ip", "-n", master.namespace]
    subprocess.run([*ip, "addr", "add", f"{fip}/32", "dev", "eth0"], check=True)
    try:
        yield fip
    finally:
        subprocess.run([*ip, "addr", "del", f"{fip}/32", "dev", "eth0"], check=False)


def octet(address: str) -> str:
    return address.rsplit(".", 1)[1]


def sans_of(pem: bytes) -> set[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        cert = x509.load_pem_x509_certificate(pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(a) for a in names.get_values_for_type(x509.IPAddress)}


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = testhosts.k8s_bin_dir() / "kubectl"
    return subprocess.run(
        [str(binary), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.endswith("_proxy")},
    )


def write_kubeconfig(path: Path, server: str, ca: str, token: str) -> None:
    """A kubeconfig of the written access (the token in a mode-600 file, not on argv)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca.encode()).decode(),
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.touch(mode=0o600)
    path.write_text(json.dumps(config))


async def test_the_floating_ip_endpoint_verifies_with_the_written_ca(
    hosts: TestBed, floating_ip: str, tmp_path: Path
) -> None:
    master, workers = hosts.hosts[0], hosts.hosts[1:2]
    params = k8s_params(key=str(hosts.client_key), cluster_fip_name=FIP_CP)
    tacker, openstack, inst, occ = cluster_vnf(
        [master.address], [w.address for w in workers], params=params
    )
    [vnfc] = [
        v
        for v in tacker.instances[inst]["instantiatedVnfInfo"]["vnfcResourceInfo"]
        if v["vduId"] == "masterNode"
    ]
    openstack.ports[(vnfc["metadata"]["stack_id"], FIP_CP)] = PortAddresses(
        (master.address,), floating_ip
    )
    svc = await cluster_service(
        f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}",
        tacker,
        openstack,
        CLUSTER,
        ssh=ssh_settings(hosts, 120.0),
    )
    try:
        t0 = time.monotonic()
        body = op_occ(instance=inst, op_occ_id=occ, operation="INSTANTIATE", state="COMPLETED")
        async with aiohttp.ClientSession() as http, http.post(callback_url(svc), json=body) as r:
            assert r.status == 204
        (event,) = await wait_settled(svc, 1, timeout=600)
        elapsed = time.monotonic() - t0
        job, steps = await svc.store.jobs.resume_state(event.id)
        assert event.status == "done", (job, [(s.name, s.status, s.error) for s in steps])
    finally:
        await svc.stop()

    ((_, access, _),) = tacker.write_backs
    server = f"https://{floating_ip}:6443"
    assert access.endpoint == server
    token = access.bearer_token.get_secret_value()

    # The API server's certificate names the floating IP (and still the master's own).
    pki = hosts.private_dir(master, "/etc/kubernetes") / "pki"
    assert {floating_ip, master.address} <= sans_of((pki / "apiserver.crt").read_bytes())
    assert access.ssl_ca_cert == (pki / "ca.crt").read_text()

    # kubectl with the written CA and token, through the floating IP.
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, server, access.ssl_ca_cert, token)
    listed = kubectl(kubeconfig, "get", "nodes", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    names = {n["metadata"]["name"] for n in json.loads(listed.stdout)["items"]}
    assert names == {f"master{octet(master.address)}", f"worker{octet(workers[0].address)}"}

    # Tacker's own client, made from the vimConnectionInfo entry as Tacker v2 keeps it.
    seen = tacker_k8s(
        {
            "vimType": "ETSINFV.KUBERNETES.V_1",
            "interfaceInfo": {"endpoint": server, "ssl_ca_cert": access.ssl_ca_cert},
            "accessInfo": {"bearer_token": token},
        }
    )
    assert seen.get("verify_ssl") is True and set(seen.get("nodes", {})) == names, seen

    # Masters that join or are healed later take their certificate's SANs from here.
    cm = kubectl(
        kubeconfig, "-n", "kube-system", "get", "configmap", "kubeadm-config", "-o", "json"
    )
    assert cm.returncode == 0, cm.stderr
    assert floating_ip in json.loads(cm.stdout)["data"]["ClusterConfiguration"]
    print(f"floating-IP endpoint on a real control plane: INSTANTIATE in {elapsed:.1f} s")
