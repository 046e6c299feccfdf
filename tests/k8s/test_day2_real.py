"""Day 2 on the real control plane: a SCALE_IN drained through the hook evicts real pods
before the VM goes, and the COMPLETED handler then converges the real cluster.

As ``test_instantiate.py``: Tacker and OpenStack are the in-memory fakes whose VNFCs are
the test hosts; SSH, kubeadm, kubectl, the API server and etcd are real, the kubelet the
stand-in (it runs the pods' phases, not containers). The drain request is posted as the
package's hook script posts it (the script itself runs with the real Tacker in
``tests/tacker/test_drain_hook_tacker.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from subscriber.config import ClusterSettings
from tests.cluster_fakes import (
    cluster_vnf,
    k8s_params,
    lcm_op_occ,
    remove_vnfc,
    server_at,
)
from tests.conftest import callback_url, wait_settled
from tests.factories import op_occ
from tests.k8s.helpers import SCRIPT_ENV, hook_answer, hooked_cluster, kubectl_json, run, wait_for
from tests.testbed import testhosts
from tests.testbed.testhosts import TestBed, nodes_ready

pytestmark = [pytest.mark.k8s, pytest.mark.asyncio]

CLUSTER = ClusterSettings(script_env=SCRIPT_ENV, token_wait_timeout=60.0, install_timeout=300.0)
TOKEN = "k8s-tier-hook-token-5e1b"
KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"


def name(role: str, address: str) -> str:
    return f"{role}{address.rsplit('.', 1)[1]}"


async def test_scale_in_drains_real_pods_before_the_vm_goes(hosts: TestBed, tmp_path: Path) -> None:
    master, stays, leaves = hosts.hosts[0:3]
    params = k8s_params(master_user="root", worker_user="root", key=str(hosts.client_key))
    tacker, openstack, inst, occ = cluster_vnf(
        [master.address], [stays.address, leaves.address], params=params
    )
    async with (
        hooked_cluster(hosts, tmp_path, tacker, openstack, CLUSTER, TOKEN) as (svc, pool),
        aiohttp.ClientSession() as http,
    ):

        async def notify(operation: str, occ_id: str, count: int) -> None:
            body = op_occ(instance=inst, op_occ_id=occ_id, operation=operation, state="COMPLETED")
            async with http.post(callback_url(svc), json=body) as r:
                assert r.status == 204
            events = await wait_settled(svc, count, timeout=600)
            assert all(e.status == "done" for e in events), [
                (e.id, e.status, e.status_detail) for e in events
            ]

        await notify("INSTANTIATE", occ, 1)

        # Four replicas, on the worker that will leave (the other is cordoned meanwhile).
        gone, kept = name("worker", leaves.address), name("worker", stays.address)
        await run(pool, master, f"{KUBECTL} cordon {kept}")
        await run(
            pool,
            master,
            f"{KUBECTL} create deployment web --image=k8s.gcr.io/pause:3.2 --replicas=4",
        )

        async def web_on(node: str) -> list[dict[str, Any]] | None:
            pods = (await kubectl_json(pool, master, "get pods -l app=web"))["items"]
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            ok = len(live) == 4 and all(
                p["spec"].get("nodeName") == node and p["status"].get("phase") == "Running"
                for p in live
            )
            return live if ok else None

        before = await wait_for(lambda: web_on(gone), 90, f"4 web pods Running on {gone}")
        await run(pool, master, f"{KUBECTL} uncordon {kept}")

        # The hook: Tacker is about to delete the leaving worker's VM.
        scale = lcm_op_occ(tacker, inst, "SCALE")
        server = server_at(tacker, openstack, inst, leaves.address)
        answer = await hook_answer(http, svc, TOKEN, inst, scale, "scale_start", server)
        assert answer["status"] == "done" and answer["nodes"] == [gone], answer

        # The pods were evicted to the worker that stays, the node is gone from the
        # cluster, and the VM was never needed for any of it after the answer.
        after = await wait_for(lambda: web_on(kept), 90, f"4 web pods Running on {kept}")
        assert not {p["metadata"]["name"] for p in before} & {p["metadata"]["name"] for p in after}
        nodes = await kubectl_json(pool, master, "get nodes")
        assert gone not in nodes_ready(nodes)

        # Tacker deletes the VM and notifies COMPLETED: the cluster already agrees.
        remove_vnfc(tacker, openstack, inst, leaves.address)
        testhosts.wipe_host(hosts, leaves)
        await notify("SCALE", scale, 3)  # INSTANTIATE, the hook's PROCESSING, COMPLETED
        nodes = await kubectl_json(pool, master, "get nodes")
        assert nodes_ready(nodes) == {name("master", master.address): True, kept: True}
        assert {n.name for n in await svc.store.inventory.nodes(inst)} == set(nodes_ready(nodes))
        hosts_file = (hosts.root / "hosts" / stays.name / "hosts").read_text()
        assert gone not in hosts_file
