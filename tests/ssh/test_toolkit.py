"""The step toolkit's node operations, one by one, on real sshd hosts.

Each function runs over real SSH as root on the test hosts, against the
stand-in kubeadm/kubectl (whose cluster state the assertions read back), the
real ``install_k8s_cluster.sh``, real files (``/etc/hosts``, the haproxy
configuration) and, for etcd, a recorded ``etcdctl`` on the host. The real
control plane runs the same functions in the ``k8s`` tier.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from handlers.toolkit import etcd, haproxy, hosts, kubeadm, kubectl
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import Topology
from schemas.cluster_params import parse_cluster_params
from subscriber.config import ClusterSettings, SshSettings
from subscriber.errors import CommandFailed
from subscriber.kernel.ports import ClusterNode
from subscriber.ssh import SshPool
from tests.cluster_fakes import k8s_params

from .conftest import testhosts

pytestmark = [pytest.mark.ssh, pytest.mark.asyncio, pytest.mark.usefixtures("restore_hostnames")]

SETTINGS = ClusterSettings(
    script_env={"K8S_SKIP_PHASES": "packages,cni"},
    token_wait_timeout=10.0,
    install_timeout=120.0,
    haproxy_reload="touch /tmp/haproxy-reloaded",
)


def node(bed: Any, index: int, role: str = "worker") -> ClusterNode:
    address = bed.hosts[index].address
    return ClusterNode(
        name=f"{role}{address.rsplit('.', 1)[1]}",
        role=role,  # type: ignore[arg-type]
        vnfc_id=f"vnfc-{index}",
        nic_ip=address,
        ssh_ip=address,
        cluster_ip=bed.hosts[0].address,
    )


@pytest.fixture
async def shell(bed: Any, ssh_settings: SshSettings) -> AsyncIterator[NodeShell]:
    testhosts.reset_cluster(bed)
    params = parse_cluster_params(k8s_params(key=str(bed.client_key)))
    async with SshPool(ssh_settings) as pool:
        yield NodeShell(pool, SETTINGS, params)


def host_file(bed: Any, index: int, name: str) -> Path:
    return Path(bed.root) / "hosts" / bed.hosts[index].name / name


async def small_cluster(bed: Any, shell: NodeShell) -> Topology:
    """master (host 0) initialised and worker (host 1) joined through the toolkit."""
    master, worker = node(bed, 0, "master"), node(bed, 1)
    topo = Topology(masters=(master,), workers=(worker,), cluster_ip=master.nic_ip)
    await hosts.upload_scripts(shell, topo.nodes)
    for n in topo.nodes:
        await hosts.write_hosts(shell, n, topo.nodes)
    report = await kubeadm.init_main_master(shell, topo)
    assert report.server == f"https://{master.nic_ip}:6443"
    data = await kubeadm.join_data(shell, master)
    assert len(data.ca_hash) == 64 and data.token.get_secret_value() not in repr(data)
    await kubeadm.join_worker(shell, topo, worker, data)
    return topo


async def test_write_hosts_converges_and_forgets(bed: Any, shell: NodeShell) -> None:
    a, b, c = node(bed, 0, "master"), node(bed, 1), node(bed, 2)
    etc_hosts = host_file(bed, 0, "hosts")
    etc_hosts.write_text(f"127.0.0.1 localhost\n10.1.1.1 {c.name}\n")
    await hosts.write_hosts(shell, a, [a, b, c])
    first = etc_hosts.read_text()
    assert first.startswith("127.0.0.1 localhost\n")
    assert f"10.1.1.1 {c.name}" not in first  # a stale line of one of our names is dropped
    assert hosts.hosts_block([a, b, c]) in first
    await hosts.write_hosts(shell, a, [a, b, c])
    assert etc_hosts.read_text() == first  # convergent
    # c leaves: the block names a and b only.
    await hosts.write_hosts(shell, a, [a, b], forget=[c.name])
    after = etc_hosts.read_text()
    assert c.name not in after and hosts.hosts_block([a, b]) in after
    hostname = await shell.run(a, "hostname")
    assert hostname.stdout.strip() == a.name


async def test_upload_scripts_puts_both_files_on_a_master_and_the_script_on_a_worker(
    bed: Any, shell: NodeShell
) -> None:
    master, worker = node(bed, 1, "master"), node(bed, 2)
    for n in (master, worker):
        await shell.run(n, f"rm -f {hosts.REMOTE_SCRIPT} {hosts.REMOTE_TOKEN_YAML}")
    await hosts.upload_scripts(shell, [master, worker])
    files = f"{hosts.REMOTE_SCRIPT} {hosts.REMOTE_TOKEN_YAML}"
    listing = await shell.run(master, f"stat -c '%a %n' {files}")
    assert listing.check().stdout.split("\n")[0] == f"755 {hosts.REMOTE_SCRIPT}"
    assert hosts.REMOTE_TOKEN_YAML in listing.stdout
    on_worker = await shell.run(worker, f"ls {files}")
    assert hosts.REMOTE_SCRIPT in on_worker.stdout
    assert hosts.REMOTE_TOKEN_YAML not in on_worker.stdout


async def test_init_join_and_node_operations(bed: Any, shell: NodeShell) -> None:
    topo = await small_cluster(bed, shell)
    master, worker = topo.main, topo.workers[0]
    assert await kubectl.node_names(shell, master) == {master.name, worker.name}
    assert await kubeadm.joined(shell, master, worker)
    assert await kubectl.is_member(shell, master, worker.name)

    await kubectl.label_node(shell, master, worker.name, {"CIS-node": "compute-1", "a": "1"})
    await kubectl.label_node(shell, master, worker.name, {"CIS-node": "compute-2", "a": None})
    labels = bed.state()["nodes"][worker.name]["labels"]
    assert labels["CIS-node"] == "compute-2" and "a" not in labels

    assert await kubectl.drain_node(shell, master, worker.name)
    assert bed.state()["nodes"][worker.name]["unschedulable"]
    assert await kubectl.delete_node(shell, master, worker.name)
    assert not await kubectl.delete_node(shell, master, worker.name)  # already gone
    assert not await kubectl.drain_node(shell, master, worker.name)
    assert await kubectl.node_names(shell, master) == {master.name}


async def test_control_plane_join_and_certificate_key(bed: Any, shell: NodeShell) -> None:
    # haproxy/keepalived are not what this test is about (the haproxy test below is).
    env = {**SETTINGS.script_env, "K8S_SKIP_PHASES": "packages,cni,ha"}
    shell = NodeShell(shell.ssh, SETTINGS.model_copy(update={"script_env": env}), shell.params)
    master, second = node(bed, 0, "master"), node(bed, 1, "master")
    topo = Topology(masters=(master, second), workers=(), cluster_ip=master.nic_ip)
    await hosts.upload_scripts(shell, topo.nodes)
    for n in topo.nodes:
        await hosts.write_hosts(shell, n, topo.nodes)
    await kubeadm.init_main_master(shell, topo)
    key = (await kubeadm.join_data(shell, master, certificate_key=True)).certificate_key
    assert key is not None and len(key.get_secret_value()) == 64
    await kubeadm.join_control_plane(shell, topo, second)
    roles = {n: v["roles"] for n, v in bed.state()["nodes"].items()}
    assert roles == {master.name: ["control-plane"], second.name: ["control-plane"]}
    # The join used a fresh token and the certificate key uploaded for it.
    (join,) = [c for c in bed.calls() if c["tool"] == "kubeadm" and c["argv"][:1] == ["join"]]
    assert "--control-plane" in join["argv"] and join["host"] == second.name


async def test_failed_command_masks_the_join_secrets(bed: Any, shell: NodeShell) -> None:
    topo = await small_cluster(bed, shell)
    data = await kubeadm.join_data(shell, topo.main)
    token = data.token.get_secret_value()
    bogus = ClusterNode(
        name="worker250",
        role="worker",
        vnfc_id="z",
        nic_ip="10.0.0.250",
        ssh_ip=topo.workers[0].ssh_ip,
    )
    (await shell.run(bogus, "rm -f /tmp/install_k8s_cluster.sh")).check()
    with pytest.raises(CommandFailed) as info:
        await kubeadm.join_worker(shell, topo, bogus, data)
    # Tacker's argv, the token by reference only: its value is in no message.
    assert token not in str(info.value) and ' -t "$LCCN_JOIN_TOKEN" ' in str(info.value)


async def test_join_secrets_never_show_in_ps_on_the_node(bed: Any, shell: NodeShell) -> None:
    """Any user of a node sees command lines: the token and key travel off argv."""
    master, second = node(bed, 0, "master"), node(bed, 1, "master")
    env = {**SETTINGS.script_env, "K8S_SKIP_PHASES": "packages,cni,ha"}
    shell = NodeShell(shell.ssh, SETTINGS.model_copy(update={"script_env": env}), shell.params)
    topo = Topology(masters=(master, second), workers=(), cluster_ip=master.nic_ip)
    await hosts.upload_scripts(shell, topo.nodes)
    await kubeadm.init_main_master(shell, topo)
    bed.set_join_delay(3.0)  # the join waits inside kubeadm: long enough to look
    try:
        joining = asyncio.create_task(kubeadm.join_control_plane(shell, topo, second))
        await asyncio.sleep(1.5)
        seen = (await shell.run(second, "ps -eo args")).check().stdout
        await joining
    finally:
        bed.set_join_delay(0.0)
    assert "kubeadm join --config" in seen  # we looked while it ran
    state = bed.state()
    assert state.get("certificate_key") and state["certificate_key"] not in seen
    for token in state.get("tokens", {}):
        assert token not in seen


async def test_admin_token_bearer_and_ca(bed: Any, shell: NodeShell) -> None:
    topo = await small_cluster(bed, shell)
    master = topo.main
    assert await kubectl.ensure_admin_token(shell, master)
    assert not await kubectl.ensure_admin_token(shell, master)  # exists: nothing created
    token = await kubectl.read_bearer_token(shell, master, wait=10.0)
    secret = bed.state()["objects"][f"Secret/default/{kubectl.TOKEN_SECRET}"]
    assert base64.b64decode(secret["data"]["token"]).decode() == token
    pem, _ = await kubectl.read_access(shell, master, wait=10.0)
    assert pem == bed.state()["cluster"]["ca_crt"]


HAPROXY_CFG = """global
    daemon
frontend kubernetes-apiserver
    bind *:16443
    mode tcp
    default_backend kubernetes-apiserver
backend kubernetes-apiserver
    mode tcp
    balance roundrobin
    server  master11 10.0.0.11:6443 check
    server  master12 10.0.0.12:6443 check
    server  master13 10.0.0.13:6443 check
listen stats
    bind *:1080
"""


async def test_haproxy_backends_removed_and_restored(bed: Any, shell: NodeShell) -> None:
    master = node(bed, 0, "master")
    healed = ClusterNode(
        name="master12", role="master", vnfc_id="x", nic_ip="10.0.0.12", ssh_ip="10.0.0.12"
    )
    cfg = await shell.run(
        master, f"mkdir -p /etc/haproxy && cat > {haproxy.HAPROXY_CFG}", input=HAPROXY_CFG
    )
    cfg.check()
    assert await haproxy.backends(shell, master) == ["master11", "master12", "master13"]

    assert await haproxy.remove_backend(shell, master, "master12")
    assert await haproxy.backends(shell, master) == ["master11", "master13"]
    assert (await shell.run(master, "test -f /tmp/haproxy-reloaded && rm /tmp/haproxy-reloaded")).ok
    assert not await haproxy.remove_backend(shell, master, "master12")  # gone: no reload
    assert not (await shell.run(master, "test -f /tmp/haproxy-reloaded")).ok

    assert await haproxy.add_backend(shell, master, healed)
    text = (await shell.run(master, f"cat {haproxy.HAPROXY_CFG}")).stdout
    assert text.splitlines()[11] == haproxy.backend_line(healed)  # after the last server line
    assert text.splitlines()[12] == "listen stats"
    assert not await haproxy.add_backend(shell, master, healed)  # there: unchanged
    moved = ClusterNode(name="master12", role="master", vnfc_id="x", nic_ip="10.0.0.99", ssh_ip="x")
    assert await haproxy.add_backend(shell, master, moved)  # a new address replaces the old
    text = (await shell.run(master, f"cat {haproxy.HAPROXY_CFG}")).stdout
    assert "10.0.0.12:6443" not in text and text.count("master12") == 1


# etcdctl as the host runs it: prints the member list, records what it is asked.
FAKE_ETCDCTL = r"""#!/bin/sh
echo "$*" >> /tmp/etcdctl.calls
case "$*" in
  *"member list -w json"*) cat /tmp/etcd-members.json ;;
  *"member remove 1a2b"*) echo "Member 1a2b removed from cluster"; : > /tmp/removed ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
"""


async def test_etcd_member_of_a_healed_master_is_removed(
    bed: Any, ssh_settings: SshSettings
) -> None:
    testhosts.reset_cluster(bed)
    params = parse_cluster_params(k8s_params(key=str(bed.client_key)))
    settings = SETTINGS.model_copy(update={"etcdctl": "/tmp/etcdctl", "etcdctl_via": "host"})
    members = {
        "members": [
            {"ID": 0x1A2B, "name": "master12", "peerURLs": ["https://10.0.0.12:2380"]},
            {"ID": 0x3C4D, "name": "master11", "peerURLs": ["https://10.0.0.11:2380"]},
        ]
    }
    async with SshPool(ssh_settings) as pool:
        shell = NodeShell(pool, settings, params)
        via = node(bed, 0, "master")
        gone = ClusterNode(
            name="master12", role="master", vnfc_id="x", nic_ip="10.0.0.12", ssh_ip="x"
        )
        setup = (
            f"cat > /tmp/etcdctl <<'EOF'\n{FAKE_ETCDCTL}EOF\nchmod +x /tmp/etcdctl\n"
            f"echo {shlex.quote(json.dumps(members))} > /tmp/etcd-members.json"
        )
        (await shell.run(via, setup)).check()
        listed = await etcd.etcd_members(shell, via)
        assert [(m.id, m.name) for m in listed] == [("1a2b", "master12"), ("3c4d", "master11")]
        assert await etcd.remove_etcd_member(shell, via, gone) == "1a2b"
        calls = (await shell.run(via, "cat /tmp/etcdctl.calls")).stdout
        assert "--cacert=/etc/kubernetes/pki/etcd/ca.crt" in calls and "member remove 1a2b" in calls
        # A member already removed: nothing to do.
        stranger = ClusterNode(
            name="master19", role="master", vnfc_id="y", nic_ip="10.0.0.19", ssh_ip="y"
        )
        assert await etcd.remove_etcd_member(shell, via, stranger) is None


async def test_etcdctl_goes_through_the_etcd_pod_by_default() -> None:
    params = parse_cluster_params(k8s_params())
    shell = NodeShell(None, ClusterSettings(), params)  # type: ignore[arg-type]
    via = ClusterNode(name="master11", role="master", vnfc_id="v", nic_ip="10.0.0.11", ssh_ip="x")
    command = etcd.etcdctl_command(shell, via, "member list -w json")
    assert command.startswith("kubectl --kubeconfig /etc/kubernetes/admin.conf exec -n kube-system")
    assert "etcd-master11 -- sh -c" in command and "ETCDCTL_API=3 etcdctl" in command
    members = etcd.parse_members(
        '{"members": [{"ID": 255, "name": "", "peerURLs": ["https://10.0.0.11:2380"]}]}'
    )
    assert members[0].id == "ff" and members[0].is_node(via)
