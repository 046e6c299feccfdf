"""Addresses from Heat and Nova are IP addresses before they are written anywhere.

What Heat reports for a port goes into ``/etc/hosts``, haproxy.cfg, a systemd drop-in
(``NO_PROXY``) and command lines on the nodes, and becomes the node's name. A value
that is not an IP address is a permanent failure naming the VNFC and its CP, and
nothing is written. Before, ``"10.0.0.5\\n6.6.6.6 evil"`` went into ``/etc/hosts``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from handlers import default_routing
from handlers.toolkit import haproxy, hosts, storage
from handlers.toolkit.topology import discover
from schemas.cluster_params import parse_cluster_params
from subscriber.config import ClusterSettings, OpenStackSettings, SshSettings
from subscriber.errors import DiscoveryError, OpenStackRequestFailed
from subscriber.kernel import Services
from subscriber.kernel.ports import ClusterNode, PortAddresses, SshTarget
from subscriber.openstack import OpenStackClient
from subscriber.service import Service
from subscriber.ssh import SshPool
from tests.cluster_fakes import MASTER_CP, WORKER_CP, cluster_vnf, k8s_params
from tests.conftest import callback_url, make_settings, wait_settled
from tests.factories import op_occ
from tests.testbed import testhosts

EVIL = "10.0.0.5\n6.6.6.6 evil"


def _ports_of(openstack: Any, cp: str) -> list[tuple[str, str]]:
    return [key for key in openstack.ports if key[1] == cp]


@pytest.mark.ssh
async def test_a_heat_address_that_is_not_an_ip_is_never_written(
    ssh_bed: Any, tmp_path: Path
) -> None:
    testhosts.reset_cluster(ssh_bed)
    master, worker = ssh_bed.hosts
    params = k8s_params(master_user="root", worker_user="root", key=str(ssh_bed.client_key))
    tacker, openstack, inst, occ = cluster_vnf([master.address], [worker.address], params=params)
    (worker_port,) = _ports_of(openstack, WORKER_CP)
    openstack.ports[worker_port] = PortAddresses((EVIL,))
    ssh = SshSettings(
        known_hosts=ssh_bed.known_hosts,
        key_dir=ssh_bed.client_key.parent,
        connect_timeout=5.0,
        command_timeout=30.0,
    )
    cluster = ClusterSettings(script_env={"K8S_SKIP_PHASES": "packages,cni"})
    settings = make_settings(f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}").model_copy(
        update={"ssh": ssh, "cluster": cluster}
    )
    svc = Service(
        settings,
        routing=default_routing(cluster=cluster, cluster_handlers=True),
        services=Services(tacker=tacker, openstack=openstack),
    )
    await svc.start()
    try:
        body = op_occ(instance=inst, op_occ_id=occ, operation="INSTANTIATE", state="COMPLETED")
        async with aiohttp.ClientSession() as http, http.post(callback_url(svc), json=body) as r:
            assert r.status == 204
        (event,) = await wait_settled(svc, 1, timeout=120)
        job, _ = await svc.store.jobs.resume_state(event.id)
    finally:
        await svc.stop()
    assert event.status == "failed"
    assert job is not None and job.error_class == "discovery"
    vnfc = next(
        v["id"]
        for v in tacker.instances[inst]["instantiatedVnfInfo"]["vnfcResourceInfo"]
        if v["vduId"] == "workerNode"
    )
    assert f"{WORKER_CP} of VNFC {vnfc}" in (job.last_error or "")
    assert "not an IP address" in (job.last_error or "") and "evil" not in (job.last_error or "")
    async with SshPool(
        SshSettings(known_hosts=ssh_bed.known_hosts, client_keys=(ssh_bed.client_key,))
    ) as pool:
        written = await pool.run(SshTarget(host=master.address), "cat /etc/hosts")
    assert "evil" not in written.stdout and "lccn-subscriber" not in written.stdout
    assert [c for c in ssh_bed.calls() if c["tool"] == "kubeadm"] == []


def _v2(ha: bool = False, **extra: Any) -> Any:
    return parse_cluster_params(k8s_params(key="/keys/id", ha=ha, **extra))


@pytest.mark.parametrize(
    ("fixed", "floating"),
    [
        (EVIL, None),
        ("fe80::1%eth0\nx", None),
        ("master", None),
        ("10.0.0.300", None),
        ("10.0.0.11", EVIL),
        ("10.0.0.11", "203.0.113.7 evil"),
    ],
)
async def test_a_nic_or_ssh_address_must_be_an_ip(fixed: str, floating: str | None) -> None:
    tacker, openstack, inst, _ = cluster_vnf(["10.0.0.11"], ["10.0.0.21"])
    (port,) = _ports_of(openstack, MASTER_CP)
    openstack.ports[port] = PortAddresses((fixed,), floating)
    with pytest.raises(DiscoveryError, match=rf"{MASTER_CP} of VNFC .*not an IP address"):
        await discover(tacker.instances[inst], _v2(), openstack)


async def test_the_cluster_vip_and_floating_ip_must_be_ips() -> None:
    tacker, openstack, inst, _ = cluster_vnf(
        ["10.0.0.11", "10.0.0.12", "10.0.0.13"], ["10.0.0.21"], vip="10.0.0.200"
    )
    (vip,) = _ports_of(openstack, "vip_CP")
    openstack.ports[vip] = PortAddresses(("10.0.0.200 evil",))
    with pytest.raises(DiscoveryError, match=r"cluster CP vip_CP: .*not an IP address"):
        await discover(tacker.instances[inst], _v2(ha=True), openstack)
    openstack.ports[vip] = PortAddresses(("10.0.0.200",))
    openstack.ports[(vip[0], "vip_fip")] = PortAddresses(("10.0.0.200",), "203.0.113.9\n")
    with pytest.raises(DiscoveryError, match=r"cluster_fip_name vip_fip .*not an IP address"):
        await discover(tacker.instances[inst], _v2(ha=True, cluster_fip_name="vip_fip"), openstack)


async def test_a_node_name_must_be_a_dns_label() -> None:
    # Tacker's names take the last octet: an IPv6 NIC address gives none.
    tacker, openstack, inst, _ = cluster_vnf(["fd00::11"], ["10.0.0.21"])
    with pytest.raises(DiscoveryError, match="is not a DNS label"):
        await discover(tacker.instances[inst], _v2(), openstack)


def test_files_refuse_a_node_that_was_not_checked() -> None:
    node = ClusterNode(name="master5", role="master", vnfc_id="v", nic_ip=EVIL, ssh_ip="10.0.0.5")
    with pytest.raises(DiscoveryError, match="not an IP address"):
        hosts.hosts_block([node])
    with pytest.raises(DiscoveryError, match="not an IP address"):
        haproxy.backend_line(node)
    named = ClusterNode(
        name="master5\n6.6.6.6", role="master", vnfc_id="v", nic_ip="10.0.0.5", ssh_ip="10.0.0.5"
    )
    with pytest.raises(DiscoveryError, match="not a DNS label"):
        hosts.hosts_block([named])


def _storage_vnf() -> tuple[dict[str, Any], Any, Any]:
    data = k8s_params(key="/keys/id")
    data["k8s_cluster_installation_param"]["storage_server"] = {
        "ssh_cp_name": "storage_server_CP",
        "username": "ubuntu",
        "password": "ubuntu",
    }
    params = parse_cluster_params(data)
    stack = "vnf-x-storage/0a1b"
    instance = {
        "id": "x",
        "instantiatedVnfInfo": {
            "vnfcResourceInfo": [
                {
                    "id": "vnfc-storage",
                    "vnfcCpInfo": [{"cpdId": "storage_server_CP"}],
                    "metadata": {"stack_id": stack},
                }
            ]
        },
    }
    _, openstack, _, _ = cluster_vnf(["10.0.0.11"], [])
    openstack.ports[(stack, "storage_server_CP")] = PortAddresses(("10.0.0.31",))
    return instance, params.storage_server, openstack


async def test_the_storage_servers_addresses_must_be_ips() -> None:
    instance, server_params, openstack = _storage_vnf()
    server = await storage.find_server(instance, server_params, openstack)
    assert (server.ssh_ip, server.nic_ip) == ("10.0.0.31", "10.0.0.31")
    openstack.ports[(server.stack_id, "nfs_CP")] = PortAddresses(("10.0.0.32 evil",))
    with pytest.raises(DiscoveryError, match=r"nfs_server_cp nfs_CP .*not an IP address"):
        await storage.nfs_server_ip(server, "nfs_CP", openstack)
    openstack.ports[(server.stack_id, "storage_server_CP")] = PortAddresses(
        ("10.0.0.31",), "$(reboot)"
    )
    with pytest.raises(DiscoveryError, match=r"storage_server_CP .*not an IP address"):
        await storage.find_server(instance, server_params, openstack)
    openstack.volumes[(server.stack_id, "vol")] = ("/dev/vdb; reboot",)
    with pytest.raises(DiscoveryError, match="not a /dev path"):
        await storage.volume_device(server, "vol", openstack)
    openstack.volumes[(server.stack_id, "vol")] = ("/dev/../etc/passwd",)
    with pytest.raises(DiscoveryError, match="not a /dev path"):
        await storage.volume_device(server, "vol", openstack)


@pytest.mark.parametrize(
    ("stack", "resource"),
    [("vnf-x/../../v1/other", "cp"), ("vnf-x/1234", ".."), ("", "cp"), ("a/b/c", "cp")],
)
async def test_a_heat_path_cannot_walk_to_another_resource(stack: str, resource: str) -> None:
    # Refused before anything is sent: this Keystone address is never contacted.
    settings = OpenStackSettings(
        auth_url="http://127.0.0.1:9/v3", username="u", password="p", project_name="p"
    )
    started = time.monotonic()
    async with OpenStackClient(settings) as client:
        with pytest.raises(OpenStackRequestFailed, match="not a stack name/id"):
            await client.port_addresses(stack, resource)
    assert time.monotonic() - started < 2.0
