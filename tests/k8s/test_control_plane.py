"""The real kubeadm, kubectl and control plane over SSH, driven like the handlers drive them.

One cluster per module (``cluster``): ``install_k8s_cluster.sh`` runs ``kubeadm
init`` on the master (the real CA-hash pipeline, ``kubeadm token create``,
``kubeadm init phase upload-certs``) and the two workers join with its output,
in parallel. The tests then check what the day-2 operations will rely on: every
node Ready with 1.20's role labels, labelling, a drain that evicts real pods
(rescheduled on the other worker), deleting a node, and ``kubeadm reset`` on a
worker and on the master. The last two tests change the cluster: they run last.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from handlers.toolkit.install_report import InstallReport, parse_install_output
from subscriber.config import SshSettings
from subscriber.ssh import SshPool
from tests.k8s.conftest import restore_hostnames
from tests.k8s.helpers import (
    SCRIPT,
    SCRIPT_ENV,
    SCRIPTS,
    ca_hash,
    kubectl_json,
    root,
    run,
    ssh_settings,
    wait_for,
)
from tests.testbed import testhosts
from tests.testbed.testhosts import TestBed, TestHost, nodes_ready

pytestmark = [pytest.mark.k8s, pytest.mark.asyncio]

POD_CIDR = "10.200.0.0/16"
SERVICE_CIDR = "10.199.187.0/24"
TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")


@dataclass
class Cluster:
    bed: TestBed
    master: TestHost
    workers: list[TestHost]
    report: InstallReport
    names: dict[str, str]  # host name -> node name
    timings: dict[str, float] = field(default_factory=dict)

    def node(self, host: TestHost) -> str:
        return self.names[host.name]


def long_ssh(bed: TestBed) -> SshSettings:
    # whole `kubectl get ... -o json` lists
    return ssh_settings(bed, 300.0, max_output_bytes=4 * 1024 * 1024)


async def build(bed: TestBed) -> Cluster:
    master, workers = bed.hosts[0], bed.hosts[1:3]
    names = {master.name: f"master{master.address.rsplit('.', 1)[1]}"}
    names |= {w.name: f"worker{w.address.rsplit('.', 1)[1]}" for w in workers}
    hosts_lines = "".join(f"{h.address} {names[h.name]}\n" for h in (master, *workers))
    timings: dict[str, float] = {}
    async with SshPool(long_ssh(bed)) as pool:

        async def prepare(host: TestHost) -> None:
            # What the handlers' upload-scripts and configure-hosts steps do.
            await pool.upload(root(host), SCRIPTS / "install_k8s_cluster.sh", SCRIPT, mode=0o755)
            named = await pool.run(
                root(host),
                f"hostname {names[host.name]} && cat >> /etc/hosts",
                input=hosts_lines,
                command_timeout=30,
            )
            named.check()

        await asyncio.gather(*(prepare(h) for h in (master, *workers)))
        t0 = time.monotonic()
        init = await run(
            pool,
            master,
            f"bash {SCRIPT} -m {master.address} -i {master.address} "
            f"-p {POD_CIDR} -a {SERVICE_CIDR}",
            env=SCRIPT_ENV,
            timeout=300,
        )
        timings["init"] = time.monotonic() - t0
        report = parse_install_output(init.stdout)
        token = report.token.get_secret_value()

        async def join(worker: TestHost) -> None:
            t = time.monotonic()
            await run(
                pool,
                worker,
                f"bash {SCRIPT} -w {worker.address} -i {master.address} -t {token} "
                f"-s {report.ssl_ca_cert_hash}",
                env=SCRIPT_ENV,
                timeout=300,
                secrets=[token],
            )
            timings[f"join {names[worker.name]}"] = time.monotonic() - t

        await asyncio.gather(*(join(w) for w in workers))
    return Cluster(bed, master, workers, report, names, timings)


@pytest.fixture(scope="module")
def cluster(k8s_hosts: TestBed) -> Iterator[Cluster]:
    testhosts.reset_cluster(k8s_hosts)
    try:
        built = asyncio.run(build(k8s_hosts))
        print(f"cluster built: {', '.join(f'{k} {v:.1f} s' for k, v in built.timings.items())}")
        yield built
    finally:
        testhosts.reset_cluster(k8s_hosts)
        restore_hostnames(k8s_hosts)


@pytest.fixture
async def pool(k8s_hosts: TestBed) -> Any:
    async with SshPool(long_ssh(k8s_hosts)) as ssh_pool:
        yield ssh_pool


async def test_init_reports_join_data_with_the_real_ca_hash(
    cluster: Cluster, pool: SshPool
) -> None:
    report = cluster.report
    assert report.server == f"https://{cluster.master.address}:6443"
    ca_file = cluster.bed.private_dir(cluster.master, "/etc/kubernetes") / "pki" / "ca.crt"
    assert report.ssl_ca_cert == ca_file.read_text()
    # The openssl pipeline of the script (and the handlers) = SHA-256 of the CA's SPKI.
    assert report.ssl_ca_cert_hash == ca_hash(report.ssl_ca_cert)

    created = await run(pool, cluster.master, "kubeadm token create")
    token = created.stdout.strip().splitlines()[-1]
    assert TOKEN.match(token)
    listed = await run(pool, cluster.master, "kubeadm token list", secrets=[token])
    assert token.split(".")[0] in listed.stdout
    # The report's certificate key is one the cluster holds: a control-plane join
    # would decrypt the kubeadm-certs Secret with it.
    assert re.fullmatch(r"[0-9a-f]{64}", report.certificate_key.get_secret_value())
    certs = await kubectl_json(pool, cluster.master, "get secret kubeadm-certs -n kube-system")
    assert "ca.crt" in certs["data"]


async def test_the_toolkits_certificate_key_on_a_host_without_default_route(
    cluster: Cluster, pool: SshPool
) -> None:
    """What the handlers run before every control-plane join (HA flavour): the real
    kubeadm needs the master's address in a config (no default route here)."""
    from handlers.toolkit.kubeadm import join_data
    from handlers.toolkit.shell import NodeShell
    from schemas.cluster_params import parse_cluster_params
    from subscriber.config import ClusterSettings
    from subscriber.kernel.ports import ClusterNode
    from tests.cluster_fakes import k8s_params

    params = parse_cluster_params(k8s_params(key=str(cluster.bed.client_key)))
    shell = NodeShell(pool, ClusterSettings(), params)
    address = cluster.master.address
    master = ClusterNode(
        name=cluster.node(cluster.master),
        role="master",
        vnfc_id="v",
        nic_ip=address,
        ssh_ip=address,
    )
    key_ = (await join_data(shell, master, certificate_key=True)).certificate_key
    assert key_ is not None
    key = key_.get_secret_value()
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    certs = await kubectl_json(pool, cluster.master, "get secret kubeadm-certs -n kube-system")
    assert "ca.crt" in certs["data"]


async def test_workers_join_and_every_node_is_ready(cluster: Cluster, pool: SshPool) -> None:
    master = cluster.node(cluster.master)
    workers = sorted(cluster.node(w) for w in cluster.workers)

    async def all_ready() -> dict[str, Any] | None:
        nodes = await kubectl_json(pool, cluster.master, "get nodes")
        ready = nodes_ready(nodes)
        return (
            nodes if sorted(ready) == sorted([master, *workers]) and all(ready.values()) else None
        )

    nodes = await wait_for(all_ready, 90, "every node Ready")
    by_name = {n["metadata"]["name"]: n for n in nodes["items"]}
    # Kubernetes 1.20 labels a kubeadm master with both role labels and taints it.
    labels = by_name[master]["metadata"]["labels"]
    assert "node-role.kubernetes.io/master" in labels
    assert "node-role.kubernetes.io/control-plane" in labels
    taints = by_name[master]["spec"].get("taints") or []
    assert {"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"} in taints
    for worker in workers:
        assert not any(k.startswith("node-role.") for k in by_name[worker]["metadata"]["labels"])
        # The controller-manager allocates pod CIDRs from kubeadm's --pod-network-cidr.
        assert by_name[worker]["spec"]["podCIDR"].startswith("10.200.")
    for node in by_name.values():
        assert node["status"]["nodeInfo"]["kubeletVersion"] == f"v{testhosts.K8S_VERSION}"

    # kubeadm's add-ons were scheduled and run: kube-proxy on every node, two CoreDNS.
    async def addons_running() -> list[dict[str, Any]] | None:
        pods = (await kubectl_json(pool, cluster.master, "get pods -n kube-system"))["items"]
        proxies = {
            p["spec"].get("nodeName")
            for p in pods
            if p["metadata"]["name"].startswith("kube-proxy-")
        }
        dns = [p for p in pods if p["metadata"]["name"].startswith("coredns-")]
        running = all(p["status"].get("phase") == "Running" for p in pods)
        return dns if proxies == {master, *workers} and len(dns) == 2 and running else None

    await wait_for(addons_running, 90, "kube-proxy and CoreDNS Running")


async def test_label_drain_delete_and_reset_a_worker(cluster: Cluster, pool: SshPool) -> None:
    master = cluster.master
    first, second = (cluster.node(w) for w in cluster.workers)
    kubectl = "kubectl --kubeconfig /etc/kubernetes/admin.conf"

    await run(pool, master, f"{kubectl} label node {first} lccn.test/pool=day2")
    labelled = await kubectl_json(pool, master, "get nodes -l lccn.test/pool=day2")
    assert [n["metadata"]["name"] for n in labelled["items"]] == [first]

    # Three replicas, all on the first worker (the second is cordoned meanwhile).
    await run(pool, master, f"{kubectl} cordon {second}")
    await run(
        pool, master, f"{kubectl} create deployment web --image=k8s.gcr.io/pause:3.2 --replicas=3"
    )

    async def web_pods(node: str) -> list[dict[str, Any]] | None:
        pods = (await kubectl_json(pool, master, "get pods -l app=web"))["items"]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        ok = len(live) == 3 and all(
            p["spec"].get("nodeName") == node and p["status"].get("phase") == "Running"
            for p in live
        )
        return live if ok and len(pods) == 3 else None

    before = await wait_for(lambda: web_pods(first), 60, f"3 web pods Running on {first}")
    await run(pool, master, f"{kubectl} uncordon {second}")

    t0 = time.monotonic()
    drained = await run(
        pool,
        master,
        f"{kubectl} drain {first} --ignore-daemonsets --delete-emptydir-data --timeout=120s",
        timeout=180,
    )
    drain_s = time.monotonic() - t0
    evicted = {p["metadata"]["name"] for p in before}
    for name in evicted:
        assert f"pod/{name} evicted" in drained.stdout + drained.stderr
    after = await wait_for(lambda: web_pods(second), 60, f"3 web pods Running on {second}")
    assert not evicted & {p["metadata"]["name"] for p in after}
    node = await kubectl_json(pool, master, f"get node {first}")
    assert node["spec"].get("unschedulable") is True

    await run(pool, master, f"{kubectl} delete node {first}")
    names = {
        n["metadata"]["name"] for n in (await kubectl_json(pool, master, "get nodes"))["items"]
    }
    assert first not in names

    worker = cluster.workers[0]
    assert "kubelet" in testhosts.kubernetes_processes(worker)
    await run(pool, worker, "kubeadm reset -f", timeout=120)
    assert testhosts.kubernetes_processes(worker) == []
    assert not (cluster.bed.private_dir(worker, "/etc/kubernetes") / "kubelet.conf").exists()
    await asyncio.sleep(2)  # a kubelet left running would register the node again
    names = {
        n["metadata"]["name"] for n in (await kubectl_json(pool, master, "get nodes"))["items"]
    }
    assert first not in names
    print(f"drain of 3 pods: {drain_s:.1f} s")


async def test_kubeadm_reset_stops_the_control_plane(cluster: Cluster, pool: SshPool) -> None:
    master = cluster.master
    running = testhosts.kubernetes_processes(master)
    for process in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"):
        assert process in running
    await run(pool, master, "kubeadm reset -f", timeout=180)
    assert testhosts.kubernetes_processes(master) == []
    with pytest.raises(OSError):
        await asyncio.open_connection(master.address, 6443)
    manifests = cluster.bed.private_dir(master, "/etc/kubernetes") / "manifests"
    assert not manifests.exists() or not any(manifests.iterdir())
    assert not any(cluster.bed.private_dir(master, "/var/lib/etcd").iterdir())
    assert not Path(cluster.bed.private_dir(master, "/etc/kubernetes") / "admin.conf").exists()
