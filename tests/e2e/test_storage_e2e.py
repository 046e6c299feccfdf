"""The storage server end to end: the real Tacker 16.0.0 instantiates the sample package's
``storage`` flavour (a storage server VM with a Cinder volume, ``storage_server`` and
``pv_registration_params`` set); ``serve`` (a subprocess, the drain hook on) formats and
mounts the volume (a loop device the simulated Cinder attaches), exports it over NFS
(NFS-Ganesha behind the test host's ``exportfs``), gives every node the NFS client and
registers the package's PVs with the storage server's address, waited for until
``Available`` (the stand-in kubectl's PersistentVolumes).

A node writes over NFS (libnfs's ``nfs-cp``) and the file lands on the storage server's
volume. A HEAL of the storage server is refused by the drain hook (``heal_start``)
while one of its PVs is ``Bound`` (the operation goes FAILED_TEMP, the VM is kept);
once the claim is gone the same heal rebuilds the server, the volume comes back with
its data (mounted, not formatted) and the PVs are registered again.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from handlers.toolkit import storage
from tests.testbed import tacker_bed as tb
from tests.testbed import testhosts
from tests.testbed.cluster_vnf import STORAGE_CP
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import NETWORK_ID, ext_virtual_links, unique_name
from tests.testbed.testhosts import inside

from .day2 import ADMIN_CONF, Loop

pytestmark = [pytest.mark.timeout(900), pytest.mark.usefixtures("fresh_cluster", "nfs_reset")]

MOUNT = "/srv/volume"  # the package's PV manifests export /srv/volume/nfs/pv1 and pv2
EXPORTS = [f"{MOUNT}/nfs/pv1", f"{MOUNT}/nfs/pv2"]
PVS = ["nfs-pv1", "nfs-pv2"]


def storage_link() -> dict[str, Any]:
    proto = {
        "layerProtocol": "IP_OVER_ETHERNET",
        "ipOverEthernet": {"ipAddresses": [{"type": "IPV4", "numDynamicAddresses": 1}]},
    }
    return {
        "id": "net0_storage",
        "resourceId": NETWORK_ID,
        "extCps": [
            {"cpdId": STORAGE_CP, "cpConfig": {f"{STORAGE_CP}_1": {"cpProtocolData": [proto]}}}
        ],
    }


def instantiate(loop: Loop, vnfd_id: str) -> dict[str, Any]:
    """Create and INSTANTIATE the storage flavour; serve's COMPLETED event once done."""
    from tests.cluster_fakes import host_params, with_storage_server

    hosts = loop.hosts
    loop.inst = loop.tacker.create(vnfd_id, unique_name("e2e-storage"))
    params = with_storage_server(
        host_params(hosts),
        username=hosts.user,
        password=hosts.password,
        mount=MOUNT,
        network="10.77.0.0/24",
    )
    occ = loop.tacker.run_op(
        loop.inst,
        "instantiate",
        {
            "flavourId": "storage",
            "vimConnectionInfo": loop.sim.vim_connection_info(),
            "extVirtualLinks": [*ext_virtual_links(NETWORK_ID), storage_link()],
            "additionalParams": params,
        },
    )
    assert occ["operationState"] == "COMPLETED", occ.get("error")
    loop.instantiated = True
    return loop.handled(occ["id"])


def storage_vnfc(loop: Loop) -> dict[str, Any]:
    [vnfc] = [v for v in loop.vnfcs() if v["vduId"] == "storage_server"]
    return vnfc


def kubectl(loop: Loop, master: str, args: str, stdin: str | None = None) -> str:
    command = f"kubectl --kubeconfig {ADMIN_CONF} {args}"
    return loop.ssh(master, command, stdin)


def pvs(loop: Loop, master: str) -> dict[str, tuple[str, str]]:
    items = json.loads(kubectl(loop, master, "get pv -o json"))["items"]
    return {
        p["metadata"]["name"]: (p["status"]["phase"], p["spec"]["nfs"]["server"]) for p in items
    }


def nfs_write(host: Any, server: str, export: str, name: str, local: Path) -> None:
    url = f"nfs://{server}{export}/{name}?version=4"
    done = inside(host, "nfs-cp", str(local), url, net_only=True)
    assert done.returncode == 0, done.stderr + done.stdout


@pytest.fixture
def nfs_reset(hosts: Any) -> Iterator[None]:
    """After the test: no volume mounted, no exports, no Ganesha on any host."""
    yield
    for host in hosts.hosts:
        inside(host, "umount", "-l", MOUNT)
        for entry in testhosts.PRIVATE_DIRS:
            if entry in ("/srv", "/etc/exports.d"):
                private = (
                    Path(hosts.root)
                    / "hosts"
                    / host.name
                    / "fs"
                    / entry.strip("/").replace("/", "-")
                )
                subprocess.run(["find", str(private), "-mindepth", "1", "-delete"], check=False)
        inside(host, "/usr/local/bin/exportfs", "-ra")


def addresses(loop: Loop) -> tuple[str, list[str], str]:
    """(master, workers, storage server) addresses, from the simulator's own state."""
    by_server = {
        p["device_id"]: p["fixed_ips"][0]["ip_address"]
        for p in loop.sim.control.state()["ports"]
        if p.get("device_id")
    }
    vnfcs = loop.vnfcs()
    ip = {v["id"]: by_server[v["computeResource"]["resourceId"]] for v in vnfcs}
    [master] = [ip[v["id"]] for v in vnfcs if v["vduId"] == "masterNode"]
    workers = sorted(ip[v["id"]] for v in vnfcs if v["vduId"] == "workerNode")
    [store] = [ip[v["id"]] for v in vnfcs if v["vduId"] == "storage_server"]
    return master, workers, store


def test_storage_instantiate_exports_the_volume_and_registers_the_pvs(
    bed: tb.BedState, hosts: Any, host_sim: SimProcess, hooked_loop: Loop, tmp_path: Path
) -> None:
    loop = hooked_loop
    assert bed.vnfd_id
    shown = instantiate(loop, bed.vnfd_id)
    steps = Loop.steps(shown)
    master, workers, store = addresses(loop)
    host = loop.host(store)

    # The volume: the loop device the simulated Cinder attached, formatted once, mounted.
    done = steps["storage-server"]["result"]
    [(mount_to, volume)] = done["volumes"].items()
    assert mount_to == MOUNT and volume["done"] == "formatted+mounted"
    assert volume["device"].startswith("/dev/loop")
    mounted = inside(host, "findmnt", "-rn", "-o", "SOURCE,FSTYPE", "--mountpoint", MOUNT)
    assert mounted.stdout.split() == [volume["device"], "ext4"], mounted.stderr
    # The export lines, applied (Ganesha listens on the storage server's 2049).
    exports = Path(hosts.root) / "hosts" / host.name / "fs" / "etc-exports.d"
    assert (exports / Path(storage.EXPORTS_FILE).name).read_text().splitlines()[1:] == [
        f"{d} 10.77.0.0/24({storage.EXPORT_OPTIONS})" for d in EXPORTS
    ]
    # The NFS client on every node, and a worker's write lands on the volume.
    clients = steps["nfs-client"]["result"]["nodes"]
    assert len(clients) == 1 + len(workers) and set(clients.values()) <= {"present", "installed"}
    local = tmp_path / "hello.txt"
    local.write_text("through the real Tacker\n")
    nfs_write(loop.host(workers[0]), store, EXPORTS[0], "hello.txt", local)
    landed = inside(host, "stat", "-c", "%u %s", f"{EXPORTS[0]}/hello.txt")
    assert landed.stdout.split() == ["65534", str(local.stat().st_size)], landed.stderr
    # The PVs: Available, with the storage server's fixed address.
    assert pvs(loop, master) == {pv: ("Available", store) for pv in PVS}
    assert steps["register-pvs"]["result"]["pvs"] == dict.fromkeys(PVS, "registered")
    assert steps["write-back"]["status"] == "done"
    data = b"".join(p.read_bytes() for p in tmp_path.glob("**/lccn.db*"))
    assert hosts.password.encode() not in data


def test_storage_heal_refused_while_a_pv_is_bound_then_rebuilt_once_released(
    bed: tb.BedState, hosts: Any, host_sim: SimProcess, hooked_loop: Loop, tmp_path: Path
) -> None:
    loop = hooked_loop
    assert bed.vnfd_id
    instantiate(loop, bed.vnfd_id)
    master, workers, store = addresses(loop)
    local = tmp_path / "kept.txt"
    local.write_text("survives the heal\n")
    nfs_write(loop.host(workers[0]), store, EXPORTS[1], "kept.txt", local)
    claim = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {
                "volumeName": "nfs-pv1",
                "storageClassName": "",
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    kubectl(loop, master, "apply -f -", stdin=claim)
    assert pvs(loop, master)["nfs-pv1"][0] == "Bound"

    # HEAL of the storage server: refused in heal_start, before Tacker touches the VM.
    vnfc = storage_vnfc(loop)
    info = loop.tacker.show(loop.inst)["instantiatedVnfInfo"]["vnfcInfo"]
    [target] = [i["id"] for i in info if i["vnfcResourceInfoId"] == vnfc["id"]]
    refused = loop.tacker.run_op(loop.inst, "heal", {"vnfcInstanceId": [target]})
    assert refused["operationState"] == "FAILED_TEMP", refused
    assert "PersistentVolumes are in use" in json.dumps(refused.get("error"))
    processing = loop.serve.event(loop.event_of(refused["id"], "PROCESSING") or 0)
    release = Loop.steps(processing)["release-pvs"]
    assert release["status"] == "failed" and "nfs-pv1 (claimed by default/data)" in str(release)
    assert storage_vnfc(loop)["computeResource"] == vnfc["computeResource"]  # the VM stays
    assert set(pvs(loop, master)) == set(PVS)
    status, _, _ = loop.tacker.call("POST", f"/vnflcm/v2/vnf_lcm_op_occs/{refused['id']}/fail")
    assert status == 200
    loop.tacker.wait_op(refused["id"])

    # The claim gone (the PV Released): the heal goes through and the server is rebuilt.
    kubectl(loop, master, "delete pvc data")
    assert pvs(loop, master)["nfs-pv1"][0] == "Released"
    host = loop.host(store)
    inside(host, "umount", "-l", MOUNT)
    testhosts.wipe_host(hosts, host)  # the rebuilt VM: its own files are gone
    healed = loop.op("heal", {"vnfcInstanceId": [target]})
    processing = loop.serve.event(loop.event_of(healed["id"], "PROCESSING") or 0)
    assert Loop.steps(processing)["release-pvs"]["result"]["deleted"] == PVS
    shown = loop.handled(healed["id"])
    steps = Loop.steps(shown)
    rebuilt = storage_vnfc(loop)
    assert rebuilt["computeResource"]["resourceId"] != vnfc["computeResource"]["resourceId"]
    volume = next(iter(steps["storage-server"]["result"]["volumes"].values()))
    assert volume["done"] == "mounted ext4"  # the same volume, not formatted again
    kept = inside(host, "cat", f"{EXPORTS[1]}/kept.txt")
    assert kept.stdout == "survives the heal\n", kept.stderr
    assert steps["register-pvs"]["result"]["pvs"] == dict.fromkeys(PVS, "registered")
    assert pvs(loop, master) == {pv: ("Available", store) for pv in PVS}
    nfs_write(loop.host(workers[1]), store, EXPORTS[0], "after.txt", local)


def test_storage_scale_out_gives_the_new_worker_the_nfs_client(
    bed: tb.BedState, hosts: Any, host_sim: SimProcess, hooked_loop: Loop, tmp_path: Path
) -> None:
    loop = hooked_loop
    assert bed.vnfd_id
    instantiate(loop, bed.vnfd_id)
    _, before, store = addresses(loop)
    out = loop.scale("SCALE_OUT")
    shown = loop.handled(out["id"])
    _, after, _ = addresses(loop)
    [new] = sorted(set(after) - set(before))
    clients = Loop.steps(shown)["nfs-client"]["result"]["nodes"]
    assert list(clients) == [f"worker{new.rsplit('.', 1)[1]}"]
    local = tmp_path / "new.txt"
    local.write_text("from the new worker\n")
    nfs_write(loop.host(new), store, EXPORTS[0], "new.txt", local)
    landed = inside(loop.host(store), "cat", f"{EXPORTS[0]}/new.txt")
    assert landed.stdout == "from the new worker\n", landed.stderr
