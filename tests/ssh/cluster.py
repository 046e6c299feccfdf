"""The ssh tier's cluster under test: a real Service running the cluster handlers on the
sshd test hosts (stand-in kubeadm, kubectl, etcdctl), the in-memory Tacker and OpenStack
as Tacker shows the VNF, and the events sent and awaited in order (:class:`Cluster`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from subscriber.config import ClusterSettings, HookSettings, SshSettings
from subscriber.kernel.ports import SshExecutor
from subscriber.service import Service
from tests.cluster_fakes import FakeOpenStack, FakeTacker, cluster_service, cluster_vnf, k8s_params
from tests.conftest import callback_url, wait_settled
from tests.factories import op_occ
from tests.testbed import testhosts

CLUSTER = ClusterSettings(
    script_env={"K8S_SKIP_PHASES": "packages,cni"},
    token_wait_timeout=10.0,
    install_timeout=120.0,
    etcdctl_via="host",  # the stand-in's etcdctl; no pods to exec into here
    haproxy_reload="",  # no haproxy process runs on the test hosts
)


def name_of(host: Any, role: str) -> str:
    return f"{role}{host.address.rsplit('.', 1)[1]}"


class Cluster:
    """One Service, one fake VNF instance and the bed; events sent and awaited in order."""

    def __init__(
        self, bed: Any, svc: Service, tacker: FakeTacker, openstack: FakeOpenStack, inst: str
    ) -> None:
        self.bed, self.svc, self.tacker, self.openstack, self.inst = (
            bed,
            svc,
            tacker,
            openstack,
            inst,
        )
        self.sent = 0

    async def notify(self, operation: str, occ: str, state: str = "COMPLETED") -> Any:
        body = op_occ(instance=self.inst, op_occ_id=occ, operation=operation, state=state)
        async with (
            aiohttp.ClientSession() as http,
            http.post(callback_url(self.svc), json=body) as r,
        ):
            assert r.status == 204
        self.sent += 1
        events = await wait_settled(self.svc, self.sent, timeout=240)
        event = max(events, key=lambda e: e.id)
        return event

    async def steps(self, event_id: int) -> dict[str, str]:
        _, rows = await self.svc.store.jobs.resume_state(event_id)
        return {r.name: r.status for r in rows}

    async def result(self, event_id: int, step: str) -> dict[str, Any]:
        """The stored result of ``step`` in the event's job."""
        _, rows = await self.svc.store.jobs.resume_state(event_id)
        found: dict[str, Any] = next(r for r in rows if r.name == step).result_json()
        return found

    async def check_agrees(self) -> set[str]:
        """Cluster nodes == VNFC nodes == inventory; every node's /etc/hosts names them all."""
        state = self.bed.state()
        cluster = set(state["nodes"])
        inventory = {n.name: n for n in await self.svc.store.inventory.nodes(self.inst)}
        vnfcs = {
            v["id"]
            for v in self.tacker.instances[self.inst]["instantiatedVnfInfo"]["vnfcResourceInfo"]
        }
        assert set(inventory) == cluster, (inventory, cluster)
        assert {n.vnfc_id for n in inventory.values()} == vnfcs
        assert all(node["ready"] for node in state["nodes"].values())
        masters = {n for n, v in inventory.items() if v.role == "master"}
        if len(masters) > 1:
            assert {m["name"] for m in state.get("etcd", {}).values()} == masters
        for node in inventory.values():
            host = next(h for h in self.bed.hosts if h.address == node.nic_ip)
            text = (Path(self.bed.root) / "hosts" / host.name / "hosts").read_text()
            named = {line.split()[1] for line in text.splitlines() if line.startswith("10.")}
            assert named == cluster | {host.name}, (host.name, text)
        return cluster


def fs(bed: Any, host: Any, target: str) -> Path:
    """Where the test host keeps ``target`` (a directory of the node's file system)."""
    return Path(bed.root) / "hosts" / host.name / "fs" / target.strip("/").replace("/", "-")


async def instantiate(
    bed: Any,
    tmp_path: Path,
    masters: list[Any],
    workers: list[Any],
    *,
    ssh: SshSettings | None = None,
    executor: SshExecutor | None = None,
    params: dict[str, Any] | None = None,
    package: Mapping[str, str | bytes] | None = None,
    prepare: Callable[[FakeTacker, FakeOpenStack, str], object] | None = None,
    cluster: ClusterSettings = CLUSTER,
    hooks: HookSettings | None = None,
    **dispatch: Any,
) -> tuple[Cluster, Any]:
    """A cluster VNF on these hosts (root with the bed's key unless ``params``; the VNF
    package holding ``package``), a Service on it, and its INSTANTIATE COMPLETED sent and
    settled: that event (not checked). The caller stops ``cluster.svc``.

    ``prepare(tacker, openstack, instance)`` runs once the hosts are reset and the VNF is
    built, before the service starts (more VNFCs, files on the hosts)."""
    testhosts.reset_cluster(bed)
    ha = len(masters) > 1
    tacker, openstack, inst, occ = cluster_vnf(
        [m.address for m in masters],
        [w.address for w in workers],
        vip=bed.unused_address if ha else None,
        params=params
        or k8s_params(master_user="root", worker_user="root", key=str(bed.client_key), ha=ha),
    )
    if package is not None:
        tacker.onboard(inst, package)
    if prepare is not None:
        prepare(tacker, openstack, inst)
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"
    update = {"hooks": hooks} if hooks else None
    svc = await cluster_service(
        db_url, tacker, openstack, cluster, ssh=ssh, executor=executor, update=update, **dispatch
    )
    c = Cluster(bed, svc, tacker, openstack, inst)
    return c, await c.notify("INSTANTIATE", occ)


async def start(
    bed: Any, ssh: SshSettings, tmp_path: Path, masters: list[Any], workers: list[Any], **kw: Any
) -> Cluster:
    """:func:`instantiate`, which must succeed."""
    c, event = await instantiate(bed, tmp_path, masters, workers, ssh=ssh, **kw)
    assert event.status == "done", await c.svc.store.jobs.resume_state(event.id)
    return c
