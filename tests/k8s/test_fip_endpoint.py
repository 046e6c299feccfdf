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
import ipaddress
import json
import os
import subprocess
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.utils import CryptographyDeprecationWarning

from subscriber.config import ClusterSettings
from subscriber.kernel.ports import KubernetesAccess, PortAddresses
from tests.cluster_fakes import cluster_service, cluster_vnf, k8s_params
from tests.k8s.full_loop import tacker_k8s
from tests.k8s.helpers import SCRIPT_ENV, instantiate_and_stop, ssh_settings
from tests.testbed import testhosts
from tests.testbed.testhosts import TestBed, TestHost

pytestmark = [pytest.mark.k8s, pytest.mark.asyncio]

CLUSTER = ClusterSettings(
    script_env=SCRIPT_ENV, token_wait_timeout=60.0, install_timeout=300.0, etcdctl_via="host"
)
FIP_CP = "fip_CP"


def add_address(host: TestHost, address: str) -> Callable[[], None]:
    """``address`` as a second address of ``host``; returns its removal."""
    ip = ["ip", "-n", host.namespace]
    subprocess.run([*ip, "addr", "add", f"{address}/32", "dev", "eth0"], check=True)
    return lambda: subprocess.run([*ip, "addr", "del", f"{address}/32", "dev", "eth0"], check=False)


@pytest.fixture
def floating_ip(hosts: TestBed) -> Iterator[str]:
    """The bed's unused address as a second address of the master's host."""
    remove = add_address(hosts.hosts[0], hosts.unused_address)
    try:
        yield hosts.unused_address
    finally:
        remove()


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


async def instantiate(
    hosts: TestBed,
    masters: list[TestHost],
    workers: list[TestHost],
    fip: str,
    tmp_path: Path,
    *,
    vip: str | None = None,
) -> tuple[KubernetesAccess, float]:
    """INSTANTIATE through a real Service with ``cluster_fip_name`` giving ``fip``; what
    it wrote back and how long it took."""
    params = k8s_params(key=str(hosts.client_key), ha=vip is not None, cluster_fip_name=FIP_CP)
    tacker, openstack, inst, occ = cluster_vnf(
        [m.address for m in masters], [w.address for w in workers], params=params, vip=vip
    )
    info = tacker.instances[inst]["instantiatedVnfInfo"]
    if vip is None:  # a single master's CPs are in its own stack, an HA cluster's in the top
        [vnfc] = [v for v in info["vnfcResourceInfo"] if v["vduId"] == "masterNode"]
        stack = vnfc["metadata"]["stack_id"]
    else:
        stack = f"vnf-{inst}/{info['metadata']['stack_id']}"
    openstack.ports[(stack, FIP_CP)] = PortAddresses((masters[0].address,), fip)
    svc = await cluster_service(
        f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}",
        tacker,
        openstack,
        CLUSTER,
        ssh=ssh_settings(hosts, 120.0),
    )
    elapsed = await instantiate_and_stop(svc, inst, occ)
    ((_, access, _),) = tacker.write_backs
    return access, elapsed


def node_names(kubeconfig: Path) -> set[str]:
    listed = kubectl(kubeconfig, "get", "nodes", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    return {n["metadata"]["name"] for n in json.loads(listed.stdout)["items"]}


def cert_sans(hosts: TestBed, master: TestHost) -> set[str]:
    pki = hosts.private_dir(master, "/etc/kubernetes") / "pki"
    return sans_of((pki / "apiserver.crt").read_bytes())


async def test_the_floating_ip_endpoint_verifies_with_the_written_ca(
    hosts: TestBed, floating_ip: str, tmp_path: Path
) -> None:
    master, workers = hosts.hosts[0], hosts.hosts[1:2]
    access, elapsed = await instantiate(hosts, [master], workers, floating_ip, tmp_path)
    server = f"https://{floating_ip}:6443"
    assert access.endpoint == server
    token = access.bearer_token.get_secret_value()

    # The API server's certificate names the floating IP (and still the master's own).
    assert {floating_ip, master.address} <= cert_sans(hosts, master)
    pki = hosts.private_dir(master, "/etc/kubernetes") / "pki"
    assert access.ssl_ca_cert == (pki / "ca.crt").read_text()

    # kubectl with the written CA and token, through the floating IP.
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, server, access.ssl_ca_cert, token)
    names = node_names(kubeconfig)
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


async def test_a_master_that_joins_names_the_floating_ip_too(
    hosts: TestBed, tmp_path: Path
) -> None:
    """HA: two masters behind the VIP (haproxy and keepalived, real), the floating IP on the
    master that joined; its own API server's certificate names the floating IP, and
    kubectl through ``<floating IP>:16443`` (haproxy balancing over both API servers)
    verifies every time."""
    main, joined = hosts.hosts[0], hosts.hosts[1]
    vip = hosts.unused_address
    fip = str(ipaddress.ip_address(vip) - 1)  # in the bed's block, past its hosts: free
    assert fip not in {h.address for h in hosts.hosts}
    remove = add_address(joined, fip)
    try:
        access, elapsed = await instantiate(hosts, [main, joined], [], fip, tmp_path, vip=vip)
        server = f"https://{fip}:16443"
        assert access.endpoint == server
        assert {fip, vip, main.address} <= cert_sans(hosts, main)
        assert {fip, vip, joined.address} <= cert_sans(hosts, joined)
        kubeconfig = tmp_path / "kubeconfig"
        token = access.bearer_token.get_secret_value()
        write_kubeconfig(kubeconfig, server, access.ssl_ca_cert, token)
        expected = {f"master{octet(main.address)}", f"master{octet(joined.address)}"}
        for _ in range(4):  # round robin: both API servers answer in turn
            assert node_names(kubeconfig) == expected
    finally:
        remove()
    print(f"floating-IP endpoint, HA: INSTANTIATE (init + control-plane join) in {elapsed:.1f} s")
