"""install_k8s_cluster.sh over SSH on real hosts, with the stand-in kubeadm/kubectl.

The flow is the one of Tacker's v1 ``instantiate_end`` (seeds 000/002,
TACKER.md §1.6): the main master runs ``kubeadm init`` and prints the join
data; other masters join as control planes with a certificate key fetched by
``kubeadm init phase upload-certs``; workers join last. Single master: the API
endpoint is ``<master>:6443``; HA: ``<VIP>:16443`` (haproxy + keepalived).
"""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from handlers.toolkit.install_report import InstallReport, parse_install_output
from subscriber.kernel.ports import SshTarget
from subscriber.ssh import SshPool
from tests import REPO
from tests.loopback import listen
from tests.testbed import testhosts

pytestmark = pytest.mark.ssh

SCRIPTS = REPO / "handlers" / "toolkit" / "node"  # node-side files
SCRIPT = "/tmp/install_k8s_cluster.sh"
# The test hosts have the (stand-in) tools: skip apt and the CNI, run the rest for real.
ENV = {"K8S_SKIP_PHASES": "packages,cni"}
POD_CIDR = "10.200.0.0/16"
SERVICE_CIDR = "10.199.187.0/24"


def octet(host: Any) -> str:
    return str(host.address.rsplit(".", 1)[1])


def root(host: Any) -> SshTarget:
    return SshTarget(host=host.address)


async def prepare(pool: SshPool, masters: list[Any], workers: list[Any]) -> None:
    """Name the nodes like Tacker does (master/worker + last octet), /etc/hosts, script."""
    names = [(h, f"master{octet(h)}") for h in masters] + [
        (h, f"worker{octet(h)}") for h in workers
    ]
    hosts_lines = "".join(f"{h.address} {name}\n" for h, name in names)

    async def one(host: Any, name: str) -> None:
        await pool.upload(root(host), SCRIPTS / "install_k8s_cluster.sh", SCRIPT, mode=0o755)
        await pool.upload(
            root(host), SCRIPTS / "create_admin_token.yaml", "/tmp/create_admin_token.yaml"
        )
        await pool.run(
            root(host),
            f"hostname {name} && cat >> /etc/hosts",
            input=hosts_lines,
        )

    await asyncio.gather(*(one(h, n) for h, n in names))


async def install(
    pool: SshPool,
    bed: Any,
    masters: list[Any],
    workers: list[Any],
    cluster_ip: str,
    *,
    sudo_worker: bool = False,
) -> InstallReport:
    """The instantiate flow; workers join in parallel (Tacker joins them one by one)."""
    ha = len(masters) > 1
    ips = ",".join(h.address for h in masters)
    main = await pool.run(
        root(masters[0]),
        f"bash {SCRIPT} -m {ips} -i {cluster_ip} -p {POD_CIDR} -a {SERVICE_CIDR}",
        env=ENV,
    )
    main.check(step="install-main-master")
    report = parse_install_output(main.stdout)
    token = report.token.get_secret_value()
    secrets = [token, report.certificate_key.get_secret_value()]
    for master in masters[1:]:
        key_run = await pool.run(
            root(masters[0]), "kubeadm init phase upload-certs --upload-certs", secrets=secrets
        )
        cert_key = key_run.check().stdout.strip().splitlines()[-1]
        result = await pool.run(
            root(master),
            f"bash {SCRIPT} -m {ips} -i {cluster_ip} -t {token} "
            f"-s {report.ssl_ca_cert_hash} -k {cert_key}",
            env=ENV,
            secrets=[*secrets, cert_key],
        )
        result.check(step=f"install-master-{master.name}")

    async def join(index: int, worker: Any) -> None:
        target = root(worker)
        if sudo_worker and index == 0:
            target = SshTarget(
                host=worker.address, username=bed.user, password=SecretStr(bed.password)
            )
        result = await pool.run(
            target,
            f"bash {SCRIPT} -w {worker.address} -i {cluster_ip} -t {token} "
            f"-s {report.ssl_ca_cert_hash}",
            env={**ENV, "ha_flag": str(ha)},
            sudo=True,
            secrets=secrets,
        )
        result.check(step=f"install-worker-{worker.name}")

    await asyncio.gather(*(join(i, w) for i, w in enumerate(workers)))
    return report


def calls(bed: Any, tool: str, verb: str) -> list[dict[str, Any]]:
    return [c for c in bed.calls() if c["tool"] == tool and c["argv"][:1] == [verb]]


def arg(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


async def assert_installed_everywhere(pool: SshPool, hosts: list[Any]) -> None:
    for host in hosts:
        assert (await pool.run(root(host), "test -f /tmp/installed")).ok, host.name


async def test_simple_cluster_one_master_two_workers(bed: Any, pool: SshPool) -> None:
    testhosts.reset_cluster(bed)
    master, workers = bed.hosts[0], bed.hosts[1:3]
    await prepare(pool, [master], workers)
    endpoint = f"{master.address}:6443"

    # A join with a wrong CA hash is refused and the script exits 255.
    ips = master.address
    main = await pool.run(
        root(master), f"bash {SCRIPT} -m {ips} -i {ips} -p {POD_CIDR} -a {SERVICE_CIDR}", env=ENV
    )
    report = parse_install_output(main.check().stdout)
    bad = await pool.run(
        root(workers[0]),
        f"bash {SCRIPT} -w {workers[0].address} -i {ips} "
        f"-t {report.token.get_secret_value()} -s {'0' * 64}",
        env={**ENV, "ha_flag": "False"},
    )
    assert bad.exit_status == 255
    assert "none of the public keys" in bad.stderr
    assert not (await pool.run(root(workers[0]), "test -e /tmp/installed")).ok

    # The main master is already initialised: re-running the script is safe.
    report = await install(pool, bed, [master], workers, master.address, sudo_worker=True)

    assert report.server == f"https://{endpoint}"
    state = bed.state()
    assert report.ssl_ca_cert_hash == state["cluster"]["ca_hash"]
    assert report.ssl_ca_cert == state["cluster"]["ca_crt"]
    inits = calls(bed, "kubeadm", "init")
    inits = [c for c in inits if c["argv"][1:2] != ["phase"]]
    assert [(c["host"], c["rc"]) for c in inits] == [(f"master{octet(master)}", 0)]
    argv = inits[0]["argv"]
    assert arg(argv, "--control-plane-endpoint") == endpoint
    assert arg(argv, "--pod-network-cidr") == POD_CIDR
    assert arg(argv, "--service-cidr") == SERVICE_CIDR
    joins = [c for c in calls(bed, "kubeadm", "join") if c["rc"] == 0]
    assert sorted(c["host"] for c in joins) == sorted(f"worker{octet(w)}" for w in workers)
    for join in joins:
        assert join["argv"][1] == endpoint
        assert "--control-plane" not in join["argv"]
        assert join["uid"] == 0  # the sudo worker ran kubeadm as root too
    assert {n: v["roles"] for n, v in state["nodes"].items()} == {
        f"master{octet(master)}": ["control-plane"],
        f"worker{octet(workers[0])}": [],
        f"worker{octet(workers[1])}": [],
    }
    nodes = await pool.run(root(master), "kubectl get nodes")
    assert nodes.check().stdout.count(" Ready ") == 3
    await assert_installed_everywhere(pool, [master, *workers])
    assert (await pool.run(root(master), "ls /etc/haproxy")).stdout == ""  # not HA

    # Re-running a worker's script does not join twice.
    again = await pool.run(
        root(workers[1]),
        f"bash {SCRIPT} -w {workers[1].address} -i {ips} -t {report.token.get_secret_value()} "
        f"-s {report.ssl_ca_cert_hash}",
        env=ENV,
    )
    assert again.check().ok and "already belongs" in again.stderr
    assert len([c for c in calls(bed, "kubeadm", "join") if c["rc"] == 0]) == 2

    # The v2 driver's token: an explicit service-account-token secret.
    await pool.run(root(master), "kubectl create -f /tmp/create_admin_token.yaml")
    token = await pool.run(
        root(master),
        "kubectl get secret default-token-k8svim -o jsonpath='{.data.token}'",
    )
    assert base64.b64decode(token.check().stdout).startswith(b"eyJ")

    # What scale-in / heal do next (TACKER.md §1.6): label, drain, delete, reset.
    leaving = f"worker{octet(workers[0])}"
    m = root(master)
    await pool.run(m, f"kubectl label nodes {leaving} CIS-node=compute-1")
    node = json.loads((await pool.run(m, f"kubectl get node {leaving} -o json")).check().stdout)
    assert node["metadata"]["labels"]["CIS-node"] == "compute-1"
    drained = await pool.run(m, f"kubectl drain {leaving} --ignore-daemonsets --timeout=30s")
    assert drained.check().stdout.endswith(f"node/{leaving} drained\n")
    assert "SchedulingDisabled" in (await pool.run(m, f"kubectl get node {leaving}")).stdout
    (await pool.run(m, f"kubectl delete node {leaving}")).check()
    assert not (await pool.run(m, f"kubectl get node {leaving}")).ok
    (await pool.run(root(workers[0]), "kubeadm reset -f")).check()
    assert not (await pool.run(root(workers[0]), "test -e /etc/kubernetes/kubelet.conf")).ok
    assert sorted(bed.state()["nodes"]) == sorted(
        [f"master{octet(master)}", f"worker{octet(workers[1])}"]
    )


async def test_ha_cluster_three_masters_two_workers(bed: Any, pool: SshPool) -> None:
    testhosts.reset_cluster(bed)
    masters, workers = bed.hosts[0:3], bed.hosts[3:5]
    vip = bed.unused_address
    await prepare(pool, masters, workers)
    report = await install(pool, bed, masters, workers, vip)
    endpoint = f"{vip}:16443"

    assert report.server == f"https://{endpoint}"
    inits = [c for c in calls(bed, "kubeadm", "init") if c["argv"][1:2] != ["phase"]]
    assert [c["host"] for c in inits] == [f"master{octet(masters[0])}"]
    assert arg(inits[0]["argv"], "--control-plane-endpoint") == endpoint
    assert "--upload-certs" in inits[0]["argv"]

    uploads = calls(bed, "kubeadm", "init")
    uploads = [c for c in uploads if c["argv"][1:3] == ["phase", "upload-certs"]]
    joins = [c for c in calls(bed, "kubeadm", "join") if c["rc"] == 0]
    control_joins = [c for c in joins if "--control-plane" in c["argv"]]
    worker_joins = [c for c in joins if "--control-plane" not in c["argv"]]
    assert sorted(c["host"] for c in control_joins) == sorted(
        f"master{octet(m)}" for m in masters[1:]
    )  # names, not numbers: master100 sorts before master99
    assert sorted(c["host"] for c in worker_joins) == sorted(f"worker{octet(w)}" for w in workers)
    for join in joins:
        assert join["argv"][1] == endpoint
    # Each control-plane join used a certificate key uploaded just before it.
    for join in control_joins:
        earlier = [u for u in uploads if u["t"] < join["t"]]
        assert earlier, "no upload-certs before a control-plane join"
        assert arg(join["argv"], "--certificate-key")

    state = bed.state()
    roles = {n: v["roles"] for n, v in state["nodes"].items()}
    assert roles == {
        **{f"master{octet(m)}": ["control-plane"] for m in masters},
        **{f"worker{octet(w)}": [] for w in workers},
    }
    # Every master: kubeconfig works, haproxy on 16443 to all masters, keepalived VIP.
    for index, master in enumerate(masters):
        nodes = await pool.run(root(master), "kubectl get nodes -o name")
        assert len(nodes.check().stdout.split()) == 5
        haproxy = (await pool.run(root(master), "cat /etc/haproxy/haproxy.cfg")).check().stdout
        assert "bind *:16443" in haproxy
        for other in masters:
            assert f"server  master{octet(other)} {other.address}:6443 check" in haproxy
        keepalived = (
            (await pool.run(root(master), "cat /etc/keepalived/keepalived.conf")).check().stdout
        )
        assert f"priority {103 - index}" in keepalived
        assert f"{vip}/24" in keepalived and "virtual_router_id 51" in keepalived
        assert ("state MASTER" in keepalived) == (index == 0)
    for worker in workers:
        assert (await pool.run(root(worker), "ls /etc/haproxy")).stdout == ""
    await assert_installed_everywhere(pool, [*masters, *workers])


async def test_script_refuses_bad_invocations(bed: Any, pool: SshPool) -> None:
    testhosts.reset_cluster(bed)
    host = bed.hosts[0]
    await pool.upload(root(host), SCRIPTS / "install_k8s_cluster.sh", SCRIPT, mode=0o755)
    cases = {
        "-m 10.1.2.3 -i 10.1.2.3": "none of the masters",
        f"-m 10.1.2.3,{host.address} -i 10.1.2.4": "joining needs -t token",
        f"-m 10.1.2.3,{host.address} -i 10.1.2.4 -t a -s b": "needs -k certificate key",
        f"-w {host.address}": "-i cluster IP is required",
        f"-m {host.address} -w {host.address}": "not both",
        "-x": "",
    }
    for args, message in cases.items():
        result = await pool.run(root(host), f"bash {SCRIPT} {args}", env=ENV)
        assert result.exit_status == 255, (args, result)
        assert message in result.stderr, (args, result.stderr)
    # A failing step inside a phase exits 255 too (no cluster to join).
    result = await pool.run(
        root(host),
        f"bash {SCRIPT} -w {host.address} -i 10.1.2.3 -t abcdef.0123456789abcdef -s "
        + shlex.quote("a" * 64),
        env=ENV,
    )
    assert result.exit_status == 255 and "connection refused" in result.stderr


async def test_cilium_cli_is_pinned_and_checked_before_it_is_unpacked(
    bed: Any, pool: SshPool, tmp_path: Path
) -> None:
    """The CNI phase fetches a pinned cilium CLI and verifies its sha256 first.

    A release is served from the test process on the bridge's address (what the
    hosts can reach), with the checksum file cilium-cli publishes beside it.
    """
    import hashlib
    import io
    import tarfile

    from aiohttp import web

    testhosts.reset_cluster(bed)
    host = bed.hosts[0]
    fake = b'#!/bin/sh\necho "$@" >> /tmp/cilium.calls\n'
    blob = io.BytesIO()
    with tarfile.open(fileobj=blob, mode="w:gz") as tar:
        info = tarfile.TarInfo("cilium")
        info.size, info.mode = len(fake), 0o755
        tar.addfile(info, io.BytesIO(fake))
    tgz = blob.getvalue()
    digest = hashlib.sha256(tgz).hexdigest()
    asked: list[str] = []

    async def release(request: web.Request) -> web.Response:
        asked.append(request.path)
        if request.path.endswith(".sha256sum"):
            return web.Response(text=f"{digest}  cilium-linux-amd64.tar.gz\n")
        return web.Response(body=tgz)

    app = web.Application()
    app.router.add_get("/{version}/{name}", release)
    runner = web.AppRunner(app)
    releases = await listen(runner, bed.bridge_address)
    await pool.upload(root(host), SCRIPTS / "install_k8s_cluster.sh", SCRIPT, mode=0o755)
    only_cni = {
        "K8S_SKIP_PHASES": "packages,ha,kubeadm,kubeconfig,report,done",
        "K8S_CNI": "cilium",
        "CILIUM_CLI_URL": releases,
    }
    command = f"bash {SCRIPT} -m {host.address} -i {host.address}"
    try:
        wrong = await pool.run(root(host), command, env={**only_cni, "CILIUM_CLI_SHA256": "0" * 64})
        assert wrong.exit_status == 255 and "is not the expected" in wrong.stderr
        assert not (await pool.run(root(host), "test -e /usr/local/bin/cilium")).ok
        good = await pool.run(root(host), command, env=only_cni)
        assert good.ok, good.stderr
        assert f"cilium CLI v0.15.19 installed (sha256 {digest})" in good.stderr
        calls = (await pool.run(root(host), "cat /tmp/cilium.calls")).stdout.splitlines()
        assert calls == ["install --version 1.14.5", "status --wait"]
        assert "/v0.15.19/cilium-linux-amd64.tar.gz.sha256sum" in asked  # pinned, not latest
    finally:
        await pool.run(root(host), "rm -f /usr/local/bin/cilium /tmp/cilium.calls")
        await runner.cleanup()
