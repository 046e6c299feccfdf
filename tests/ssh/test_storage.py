"""The storage server through a real Service on real sshd hosts: a loop device as its
Cinder volume, NFS-Ganesha behind the hosts' ``exportfs`` as its NFS server, the
stand-in kubectl's PersistentVolumes. Tacker and OpenStack are the in-memory fakes
(the VNF package is a zip the fake Tacker hands out by vnfdId).

A worker writes into an export with libnfs's user-space client (``nfs-cp``; the
hosts have no kernel NFS client) and the file lands on the storage server's volume,
owned by the squashed user; the storage server rebuilt (its private files wiped,
its volume kept) mounts the volume again without formatting it: the file is still there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from handlers.toolkit import storage
from subscriber.config import SshSettings
from subscriber.kernel.ports import PortAddresses
from tests.cluster_fakes import (
    STORAGE_CP,
    FakeOpenStack,
    FakeTacker,
    cluster_service,
    cluster_vnf,
    k8s_params,
    lcm_op_occ,
    uid,
    with_storage_server,
)
from tests.conftest import rerun
from tests.ssh.cluster import CLUSTER, Cluster, fs
from tests.testbed.testhosts import inside

from .conftest import testhosts

pytestmark = [pytest.mark.ssh, pytest.mark.asyncio, pytest.mark.usefixtures("restore_hostnames")]

MOUNT = "/srv/lccn/volume"
EXPORTS = [f"{MOUNT}/nfs/pv1", f"{MOUNT}/nfs/pv2"]
VNFD = "vnfd-storage"
SETTINGS = CLUSTER.model_copy(update={"pv_available_timeout": 20.0})


def pv_manifest(name: str, path: str) -> str:
    return (
        "apiVersion: v1\nkind: PersistentVolume\n"
        f"metadata:\n  name: {name}\n"
        "spec:\n  capacity:\n    storage: 1Gi\n  accessModes: [ReadWriteMany]\n"
        "  persistentVolumeReclaimPolicy: Retain\n"
        f"  nfs:\n    server: 192.0.2.1\n    path: {path}\n"
    )


def add_storage_vnfc(
    tacker: FakeTacker, openstack: FakeOpenStack, inst: str, address: str, device: str
) -> dict[str, Any]:
    """The storage server's VNFC (its port's address, its volume attached as ``device``)
    and the package with the PV manifests; returns the VNFC (its ``id`` may be changed to
    stand for a rebuilt VM)."""
    stack = f"vnf-{inst}-storage/{uid()}"
    vnfc: dict[str, Any] = {
        "id": uid(),
        "vduId": "storage_server",
        "computeResource": {"resourceId": uid()},
        "vnfcCpInfo": [{"id": uid(), "cpdId": STORAGE_CP}],
        "metadata": {"stack_id": stack},
    }
    tacker.instances[inst]["instantiatedVnfInfo"]["vnfcResourceInfo"].append(vnfc)
    manifests = {
        f"Files/kubernetes/nfs-pv{index}.yaml": pv_manifest(f"pv{index}", path)
        for index, path in enumerate(EXPORTS, start=1)
    }
    tacker.onboard(inst, manifests, VNFD)
    openstack.ports[(stack, STORAGE_CP)] = PortAddresses((address,))
    openstack.volumes[(stack, "storage_server_volume")] = (device,)
    return vnfc


def stop_nfs(bed: Any, host: Any) -> None:
    """The storage host as it was: volume unmounted, exports gone, Ganesha stopped."""
    inside(host, "umount", "-l", MOUNT)
    testhosts.wipe_host(bed, host)
    inside(host, "/usr/local/bin/exportfs", "-ra")


def storage_params(bed: Any) -> dict[str, Any]:
    """Root with the test key on the nodes; the storage server logs in with its own
    user and password (sudo), as the seeds' storage_server does."""
    params = k8s_params(master_user="root", worker_user="root", key=str(bed.client_key))
    return with_storage_server(
        params, username=bed.user, password=bed.password, mount=MOUNT, network="10.77.0.0/24"
    )


async def test_storage_server_nfs_and_pvs_then_a_rebuilt_storage_server(
    bed: Any, ssh_settings: SshSettings, tmp_path: Path, loop_device: str
) -> None:
    master, worker, store = bed.hosts[0], bed.hosts[1], bed.hosts[3]
    testhosts.reset_cluster(bed)
    tacker, openstack, inst, occ = cluster_vnf(
        [master.address], [worker.address], params=storage_params(bed)
    )
    vnfc = add_storage_vnfc(tacker, openstack, inst, store.address, loop_device)

    db_url = f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"
    svc = await cluster_service(db_url, tacker, openstack, SETTINGS, ssh=ssh_settings)
    c = Cluster(bed, svc, tacker, openstack, inst)
    try:
        event = await c.notify("INSTANTIATE", occ)
        assert event.status == "done", str(await svc.store.jobs.resume_state(event.id))[-3000:]
        done = await c.result(event.id, "storage-server")
        assert done["volumes"] == {MOUNT: {"device": loop_device, "done": "formatted+mounted"}}
        mounted = inside(store, "findmnt", "-rn", "-o", "SOURCE,FSTYPE", "--mountpoint", MOUNT)
        assert mounted.stdout.split() == [loop_device, "ext4"], mounted.stderr
        exports = fs(bed, store, "/etc/exports.d") / Path(storage.EXPORTS_FILE).name
        assert exports.read_text().splitlines()[1:] == [
            f"{d} 10.77.0.0/24({storage.EXPORT_OPTIONS})" for d in EXPORTS
        ]
        clients = await c.result(event.id, "nfs-client")
        assert set(clients["nodes"].values()) == {"present"} and len(clients["nodes"]) == 2

        # The worker writes through NFS (Ganesha on the storage host, port 2049) ...
        local = tmp_path / "hello.txt"
        local.write_text("written over NFS\n")
        url = f"nfs://{store.address}{EXPORTS[0]}/hello.txt?version=4"
        copied = inside(worker, "nfs-cp", str(local), url, net_only=True)
        assert copied.returncode == 0, copied.stderr + copied.stdout
        # ... and it is on the storage server's volume, as the squashed user.
        landed = inside(store, "stat", "-c", "%u %s", f"{EXPORTS[0]}/hello.txt")
        assert landed.stdout.split() == ["65534", str(local.stat().st_size)], landed.stderr
        listed = inside(
            worker, "nfs-ls", f"nfs://{store.address}{EXPORTS[1]}?version=4", net_only=True
        )
        assert listed.returncode == 0, listed.stderr

        # The PVs, Available, with the storage server's address.
        pvs = json.loads(
            inside(
                master,
                "kubectl",
                "--kubeconfig",
                "/etc/kubernetes/admin.conf",
                "get",
                "pv",
                "-o",
                "json",
            ).stdout
        )["items"]
        assert {
            p["metadata"]["name"]: (p["status"]["phase"], p["spec"]["nfs"]["server"]) for p in pvs
        } == {
            "pv1": ("Available", store.address),
            "pv2": ("Available", store.address),
        }

        # The same job again changes nothing.
        assert (await rerun(svc, event.id)).status == "done"
        again = await c.result(event.id, "storage-server")
        assert again["volumes"][MOUNT]["done"] == "mounted-already"
        assert again["exportsChanged"] is False
        registered = await c.result(event.id, "register-pvs")
        assert registered["pvs"] == {"pv1": "already Available", "pv2": "already Available"}

        # The storage server rebuilt (a HEAL of its VNFC): its files are gone, its volume
        # (data and all) comes back: mounted, not formatted; exports and PVs as before.
        inside(store, "umount", "-l", MOUNT)
        testhosts.wipe_host(bed, store)
        vnfc["id"] = uid()
        event = await c.notify("HEAL", lcm_op_occ(tacker, inst, "HEAL"))
        assert event.status == "done", str(await svc.store.jobs.resume_state(event.id))[-3000:]
        healed = await c.result(event.id, "storage-server")
        assert healed["volumes"][MOUNT]["done"] == "mounted ext4"
        assert healed["exportsChanged"] is True
        kept = inside(store, "cat", f"{EXPORTS[0]}/hello.txt")
        assert kept.stdout == "written over NFS\n", kept.stderr
        again_url = f"nfs://{store.address}{EXPORTS[0]}/again.txt?version=4"
        assert inside(worker, "nfs-cp", str(local), again_url, net_only=True).returncode == 0
    finally:
        await svc.stop()
        stop_nfs(bed, store)
    data = b"".join(p.read_bytes() for p in tmp_path.glob("lccn.db*"))
    assert bed.password.encode() not in data
