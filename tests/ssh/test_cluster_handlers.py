"""The INSTANTIATE handler through a real Service (runner, SQLite store) on real sshd hosts.

Tacker and OpenStack are the in-memory fakes of ``tests.cluster_fakes`` (their
VNFC addresses are the test hosts'); SSH, the install script and the stand-in
kubeadm/kubectl are real. The recorded kubeadm calls and the stand-in cluster
state are held against the seeds' flow (TACKER.md §1.6, seeds 000/002).
"""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from subscriber.config import ClusterSettings, SshSettings
from subscriber.service import Service
from subscriber.store import StepStatus
from tests.cluster_fakes import cluster_service, cluster_vnf, host_params
from tests.conftest import callback_url, rerun, wait_settled
from tests.factories import op_occ
from tests.testbed import testhosts

pytestmark = [pytest.mark.ssh, pytest.mark.asyncio, pytest.mark.usefixtures("restore_hostnames")]

CLUSTER = ClusterSettings(
    script_env={"K8S_SKIP_PHASES": "packages,cni"}, token_wait_timeout=10.0, install_timeout=120.0
)


def octet(host: Any) -> str:
    return str(host.address.rsplit(".", 1)[1])


def params(bed: Any, ha: bool = False) -> dict[str, Any]:
    # Masters as root with a key, workers as a sudo user with a password (Tacker's way).
    return host_params(bed, ha=ha)


async def notify(svc: Service, instance: str, occ: str) -> None:
    body = op_occ(instance=instance, op_occ_id=occ, operation="INSTANTIATE", state="COMPLETED")
    async with aiohttp.ClientSession() as http, http.post(callback_url(svc), json=body) as resp:
        assert resp.status == 204


def kubeadm(bed: Any, verb: str) -> list[dict[str, Any]]:
    out = [c for c in bed.calls() if c["tool"] == "kubeadm" and c["argv"][:1] == [verb]]
    if verb == "init":
        out = [c for c in out if c["argv"][1:2] != ["phase"]]
    return out


def arg(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


async def steps_of(svc: Service, event_id: int) -> dict[str, str]:
    job, rows = await svc.store.jobs.resume_state(event_id)
    assert job is not None
    return {r.name: r.status for r in rows}


def assert_no_secret_stored(db_file: Path, *secrets: str) -> None:
    data = b"".join(p.read_bytes() for p in db_file.parent.glob(db_file.name + "*"))
    for secret in secrets:
        assert secret.encode() not in data


async def test_simple_cluster_then_replay_is_a_no_op(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    testhosts.reset_cluster(bed)
    master, workers = bed.hosts[0], bed.hosts[1:3]
    tacker, openstack, inst, occ = cluster_vnf(
        [master.address], [w.address for w in workers], params=params(bed)
    )
    db = tmp_path / "lccn.db"
    svc = await cluster_service(
        f"sqlite+aiosqlite:///{db}", tacker, openstack, CLUSTER, ssh=ssh_settings
    )
    try:
        t0 = time.monotonic()
        await notify(svc, inst, occ)
        (event,) = await wait_settled(svc, 1, timeout=180)
        elapsed = time.monotonic() - t0
        assert event.status == "done", (await svc.store.jobs.resume_state(event.id))[0]
        m_name = f"master{octet(master)}"
        w_names = sorted(f"worker{octet(w)}" for w in workers)

        # The seeds' flow: one init on the master, the workers join its :6443.
        endpoint = f"{master.address}:6443"
        (init,) = kubeadm(bed, "init")
        assert init["host"] == m_name and init["rc"] == 0
        assert arg(init["argv"], "--control-plane-endpoint") == endpoint
        assert arg(init["argv"], "--pod-network-cidr") == "10.200.0.0/16"
        assert arg(init["argv"], "--service-cidr") == "10.199.187.0/24"
        joins = [c for c in kubeadm(bed, "join") if c["rc"] == 0]
        assert sorted(c["host"] for c in joins) == w_names
        assert all(c["argv"][1] == endpoint and c["uid"] == 0 for c in joins)
        state = bed.state()
        assert {n: v["roles"] for n, v in state["nodes"].items()} == {
            m_name: ["control-plane"],
            **{w: [] for w in w_names},
        }

        # Write-back: our endpoint, the cluster's CA, a working bearer token.
        ((wb_inst, access, api),) = tacker.write_backs
        assert (wb_inst, api, access.endpoint) == (inst, "v2", f"https://{endpoint}")
        assert access.ssl_ca_cert == state["cluster"]["ca_crt"]
        token = access.bearer_token.get_secret_value()
        secret = state["objects"]["Secret/default/default-token-k8svim"]
        assert base64.b64decode(secret["data"]["token"]).decode() == token

        # Inventory: node name <-> VNFC <-> addresses, per instance.
        nodes = {n.name: n for n in await svc.store.inventory.nodes(inst)}
        assert sorted(nodes) == sorted([m_name, *w_names])
        assert nodes[m_name].role == "master" and nodes[m_name].nic_ip == master.address
        vnfcs = tacker.instances[inst]["instantiatedVnfInfo"]["vnfcResourceInfo"]
        assert {n.vnfc_id for n in nodes.values()} == {v["id"] for v in vnfcs}

        # /etc/hosts on every node names every node.
        for host in (master, *workers):
            text = (host_dir(bed, host) / "hosts").read_text()
            for other, name in [(master, m_name)] + [(w, f"worker{octet(w)}") for w in workers]:
                assert f"{other.address} {name}\n" in text

        # The same job again: every guarded step skips, nothing new on the cluster.
        calls_before = len(bed.calls())
        kubeadm_before = [c for c in bed.calls() if c["tool"] == "kubeadm"]
        assert (await rerun(svc, event.id)).status == "done"
        statuses = await steps_of(svc, event.id)
        assert statuses[f"init-master-{m_name}"] == StepStatus.SKIPPED
        assert statuses["join-workers"] == StepStatus.SKIPPED
        assert statuses["admin-token"] == StepStatus.SKIPPED
        assert statuses["write-back"] == StepStatus.SKIPPED
        assert [c for c in bed.calls() if c["tool"] == "kubeadm"] == kubeadm_before
        assert len(tacker.write_backs) == 1
        assert len(bed.calls()) > calls_before  # it did look (kubectl get node ...)
    finally:
        await svc.stop()
    assert_no_secret_stored(db, token, bed.password)
    print(f"simple cluster through the handler: {elapsed:.1f} s")


def host_dir(bed: Any, host: Any) -> Path:
    return Path(bed.root) / "hosts" / host.name


async def test_ha_cluster_three_masters_two_workers(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    testhosts.reset_cluster(bed)
    masters, workers = bed.hosts[0:3], bed.hosts[3:5]
    vip = bed.unused_address
    tacker, openstack, inst, occ = cluster_vnf(
        [m.address for m in masters],
        [w.address for w in workers],
        vip=vip,
        params=params(bed, ha=True),
    )
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"
    svc = await cluster_service(db_url, tacker, openstack, CLUSTER, ssh=ssh_settings)
    try:
        await notify(svc, inst, occ)
        (event,) = await wait_settled(svc, 1, timeout=240)
        assert event.status == "done", (await svc.store.jobs.resume_state(event.id))[0]
    finally:
        await svc.stop()
    endpoint = f"{vip}:16443"
    (init,) = kubeadm(bed, "init")
    assert init["host"] == f"master{octet(masters[0])}"
    assert arg(init["argv"], "--control-plane-endpoint") == endpoint
    joins = [c for c in kubeadm(bed, "join") if c["rc"] == 0]
    control = [c for c in joins if "--control-plane" in c["argv"]]
    assert [c["host"] for c in control] == [f"master{octet(m)}" for m in masters[1:]]
    assert sorted(c["host"] for c in joins if c not in control) == sorted(
        f"worker{octet(w)}" for w in workers
    )
    assert all(c["argv"][1] == endpoint for c in joins)
    uploads = [
        c
        for c in bed.calls()
        if c["tool"] == "kubeadm" and c["argv"][1:3] == ["phase", "upload-certs"]
    ]
    for join in control:  # each control-plane join used a key uploaded just before
        assert any(u["t"] < join["t"] for u in uploads)
    roles = {n: v["roles"] for n, v in bed.state()["nodes"].items()}
    assert roles == {
        **{f"master{octet(m)}": ["control-plane"] for m in masters},
        **{f"worker{octet(w)}": [] for w in workers},
    }
    ((_, access, _),) = tacker.write_backs
    assert access.endpoint == f"https://{endpoint}"


async def test_unreachable_host_is_transient_and_wrong_host_key_permanent(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path
) -> None:
    testhosts.reset_cluster(bed)
    master = bed.hosts[0]
    # A worker VNFC whose address nobody answers on: connect fails -> retry later.
    tacker, openstack, inst, occ = cluster_vnf(
        [master.address], [bed.unused_address], params=params(bed)
    )
    quick = ssh_settings.model_copy(update={"connect_timeout": 2.0})
    svc = await cluster_service(
        f"sqlite+aiosqlite:///{tmp_path / 'a.db'}",
        tacker,
        openstack,
        CLUSTER,
        ssh=quick,
        backoff_initial=60.0,
        backoff_max=120.0,
    )
    try:
        await notify(svc, inst, occ)
        async with asyncio.timeout(60):
            while True:
                (event,) = await svc.store.events.list()
                if event.status == "retry":
                    break
                await asyncio.sleep(0.1)
        job, rows = await svc.store.jobs.resume_state(event.id)
        assert job is not None and job.error_class == "ssh-connect", job
        assert job.next_attempt_at is not None and job.next_attempt_at > time.time() + 20
        assert {r.name: r.status for r in rows}["upload-scripts"] == StepStatus.FAILED
    finally:
        await svc.stop()

    # The master's address now presents another host's key: refused for good.
    known = tmp_path / "known_hosts"
    other_key = bed.hosts[1].host_key
    known.write_text(f"{master.address} {other_key}\n")
    wrong = ssh_settings.model_copy(update={"known_hosts": known})
    tacker, openstack, inst, occ = cluster_vnf([master.address], [], params=params(bed))
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'b.db'}"
    svc = await cluster_service(db_url, tacker, openstack, CLUSTER, ssh=wrong)
    try:
        await notify(svc, inst, occ)
        (event,) = await wait_settled(svc, 1, timeout=60)
        assert event.status == "failed"
        job, _ = await svc.store.jobs.resume_state(event.id)
        assert job is not None and job.error_class == "ssh-host-key", job
        assert job.attempts == 1
    finally:
        await svc.stop()
    assert kubeadm(bed, "init") == []
