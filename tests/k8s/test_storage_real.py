"""The storage server's PersistentVolumes on the real control plane: the API server and the
PV controller (kube-controller-manager) make them ``Available`` and bind a claim, so the
heal guard meets a real ``Bound``.

As the other k8s-tier tests: Tacker and OpenStack are the in-memory fakes whose VNFCs are
the test hosts; SSH, kubeadm, kubectl, the API server, the controller manager and etcd
are real, the kubelet the stand-in. The storage server is a test host with a loop
device as its volume and NFS-Ganesha behind its ``exportfs``. The drain request is posted
as the package's hook script posts it (Tacker's ``heal_start``).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from subscriber.config import ClusterSettings
from tests.cluster_fakes import cluster_vnf, lcm_op_occ, uid
from tests.conftest import callback_url, wait_settled
from tests.factories import op_occ
from tests.k8s.conftest import restore_hostnames
from tests.k8s.helpers import SCRIPT_ENV, hook_answer, hooked_cluster, kubectl_json, run, wait_for
from tests.ssh.test_storage import MOUNT, add_storage_vnfc, storage_params
from tests.testbed import testhosts
from tests.testbed.testhosts import TestBed, inside

pytestmark = [pytest.mark.k8s, pytest.mark.asyncio]

CLUSTER = ClusterSettings(
    script_env=SCRIPT_ENV,
    token_wait_timeout=60.0,
    install_timeout=300.0,
    pv_available_timeout=60.0,
)
TOKEN = "k8s-tier-storage-hook-7a2f"
KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"


@pytest.fixture
def hosts(k8s_hosts: TestBed) -> Iterator[TestBed]:
    testhosts.reset_cluster(k8s_hosts)
    yield k8s_hosts
    store = k8s_hosts.hosts[2]
    inside(store, "umount", "-l", MOUNT)
    testhosts.reset_cluster(k8s_hosts)
    inside(store, "/usr/local/bin/exportfs", "-ra")  # no exports left: Ganesha stops
    restore_hostnames(k8s_hosts)


async def test_storage_pvs_available_bound_claim_refuses_the_heal_on_the_real_api_server(
    hosts: TestBed, tmp_path: Path, loop_device: str
) -> None:
    master, worker, store = hosts.hosts[0:3]
    tacker, openstack, inst, occ = cluster_vnf(
        [master.address], [worker.address], params=storage_params(hosts)
    )
    vnfc = add_storage_vnfc(tacker, openstack, inst, store.address, loop_device)
    sent = 0
    async with (
        hooked_cluster(hosts, tmp_path, tacker, openstack, CLUSTER, TOKEN) as (svc, pool),
        aiohttp.ClientSession() as http,
    ):

        async def notify(operation: str, occ_id: str) -> None:
            nonlocal sent
            body = op_occ(instance=inst, op_occ_id=occ_id, operation=operation, state="COMPLETED")
            async with http.post(callback_url(svc), json=body) as r:
                assert r.status == 204
            sent += 1
            events = await wait_settled(svc, sent, timeout=600)
            last = max(events, key=lambda e: e.id)
            assert last.status == "done", [(e.id, e.status, e.status_detail) for e in events]

        async def pvs() -> dict[str, tuple[str, str]]:
            items = (await kubectl_json(pool, master, "get pv"))["items"]
            return {
                p["metadata"]["name"]: (p["status"].get("phase"), p["spec"]["nfs"]["server"])
                for p in items
            }

        async def drain(heal: str) -> dict[str, Any]:
            """The hook's request for the storage server's VM, and the final answer."""
            nonlocal sent
            sent += 1  # the hook's request stores a PROCESSING event
            server = vnfc["computeResource"]["resourceId"]
            return await hook_answer(http, svc, TOKEN, inst, heal, "heal_start", server)

        await notify("INSTANTIATE", occ)
        # The real PV controller made both Available, with the storage server's address.
        assert await pvs() == {
            "pv1": ("Available", store.address),
            "pv2": ("Available", store.address),
        }

        # A claim the real binder binds to pv1.
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {
                "volumeName": "pv1",
                "storageClassName": "",
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        text = shlex.quote(json.dumps(claim))
        await run(pool, master, f"printf '%s' {text} | {KUBECTL} apply -f -")

        async def bound() -> bool:
            return (await pvs()).get("pv1", ("", ""))[0] == "Bound"

        await wait_for(bound, 90, "pv1 Bound to the claim")

        # heal_start of the storage server: refused, nothing deleted.
        refused = await drain(lcm_op_occ(tacker, inst, "HEAL"))
        assert refused["status"] == "failed", refused
        assert "PersistentVolumes are in use" in json.dumps(refused)
        assert set(await pvs()) == {"pv1", "pv2"}

        # The claim gone: pv1 Released; the next heal deletes both PVs first ...
        await run(pool, master, f"{KUBECTL} delete pvc data --wait=true")

        async def released() -> bool:
            return (await pvs()).get("pv1", ("", ""))[0] == "Released"

        await wait_for(released, 90, "pv1 Released")
        heal = lcm_op_occ(tacker, inst, "HEAL")
        answer = await drain(heal)
        assert answer["status"] == "done", answer
        assert await pvs() == {}

        # ... Tacker rebuilds the VM (same address, new VNFC) and the PVs come back.
        inside(store, "umount", "-l", MOUNT)
        testhosts.wipe_host(hosts, store)
        vnfc["id"] = uid()
        await notify("HEAL", heal)
        assert await pvs() == {
            "pv1": ("Available", store.address),
            "pv2": ("Available", store.address),
        }
