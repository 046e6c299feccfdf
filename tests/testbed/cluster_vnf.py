"""An in-memory Tacker and OpenStack serving one cluster VNF (the handlers' ports' seams).

:class:`FakeTacker` serves a VNF instance and its op-occs the way Tacker v2 (or,
with ``api="v1"``, v1) shows them and records every write and which API each
read went to; :class:`FakeOpenStack` answers Heat port, server-stack and Nova
host lookups for that instance. :func:`cluster_vnf` builds both for a cluster
whose VNFC "VMs" are given addresses (the SSH test hosts' in the ``ssh`` tier,
and in ``bench/scale_join.py``); :func:`add_worker`, :func:`remove_vnfc` and
:func:`rebuild_vnfc` change it as SCALE and HEAL do.

v1 as Tacker 16.0.0 shows it: VNFCs name their Nova server but no stack
(the servers sit in AutoScalingGroup members under ``vnflcm_<id>``), the op-occ's
``operationParams`` is JSON text, the instance keeps the instantiation's
``additionalParams`` and a ``vimConnectionInfo`` list (the OpenStack VIM first).
The tests take these through ``tests/cluster_fakes.py``.
"""

from __future__ import annotations

import io
import json
import uuid
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from subscriber.errors import OpenStackNotFound, PackageNotFound, TackerRejected, VimNotOurs
from subscriber.kernel.ports import (
    KubernetesAccess,
    PortAddresses,
    ServerPlacement,
)

MASTER_CP = "masterNode_CP1"
WORKER_CP = "workerNode_CP2"
VIP_CP = "vip_CP"
STORAGE_CP = "storage_server_CP"


LIST_EXCLUDED = frozenset(
    {"operationParams", "error", "resourceChanges", "changedInfo", "changedExtConnectivity"}
)


def uid() -> str:
    return str(uuid.uuid4())


def vnf_package(files: Mapping[str, str | bytes]) -> bytes:
    """A VNF package (CSAR) zip holding ``files``, with a TOSCA.meta unless they give one."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        if "TOSCA-Metadata/TOSCA.meta" not in files:
            archive.writestr("TOSCA-Metadata/TOSCA.meta", "TOSCA-Meta-File-Version: 1.0\n")
        for name, data in files.items():
            archive.writestr(name, data)
    return buf.getvalue()


@dataclass
class FakeTacker:
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    op_occs: dict[str, dict[str, Any]] = field(default_factory=dict)
    register_vims: bool | None = None  # tacker.register_vim: None = v1 instances only
    write_backs: list[tuple[str, KubernetesAccess, str]] = field(default_factory=list)
    cleared: list[tuple[str, str]] = field(default_factory=list)
    vims: dict[str, str] = field(default_factory=dict)  # name -> id
    vim_owners: dict[str, str] = field(default_factory=dict)  # name -> VNF instance
    deleted_vims: list[str] = field(default_factory=list)
    gets: int = 0
    apis: list[str | None] = field(default_factory=list)  # the API of every read
    packages: dict[str, bytes] = field(default_factory=dict)  # vnfdId -> package zip

    async def get_vnf_instance(
        self, vnf_instance_id: str, *, api: str | None = None
    ) -> dict[str, Any]:
        self.gets += 1
        self.apis.append(api)
        if vnf_instance_id not in self.instances:
            raise TackerRejected(f"GET vnf_instances/{vnf_instance_id}: 404", status=404)
        return self.instances[vnf_instance_id]

    async def get_op_occ(self, op_occ_id: str, *, api: str | None = None) -> dict[str, Any]:
        self.gets += 1
        self.apis.append(api)
        if op_occ_id not in self.op_occs:
            raise TackerRejected(f"GET vnf_lcm_op_occs/{op_occ_id}: 404", status=404)
        return self.op_occs[op_occ_id]

    async def list_op_occs(
        self, filter: str | None = None, *, api: str | None = None
    ) -> list[dict[str, Any]]:
        """Only the filter the handlers use: ``(eq,vnfInstanceId,X);(eq,operation,Y)``.

        As Tacker (SOL013 ``exclude_default``), a list leaves out ``operationParams``,
        ``error``, ``resourceChanges``, ``changedInfo`` and ``changedExtConnectivity``.
        """
        self.gets += 1
        self.apis.append(api)
        wanted = dict(part.strip("()").split(",")[1:] for part in (filter or "").split(";") if part)
        return [
            {k: v for k, v in o.items() if k not in LIST_EXCLUDED}
            for o in self.op_occs.values()
            if all(o.get(k) == v for k, v in wanted.items())
        ]

    async def write_back(
        self, vnf_instance_id: str, access: KubernetesAccess, *, api: str = "v2"
    ) -> str:
        self.write_backs.append((vnf_instance_id, access, api))
        instance = self.instances[vnf_instance_id]
        if api == "v1":  # the list, as Tacker v1 shows our entry (no token, no CA)
            entries = [
                e for e in instance.get("vimConnectionInfo") or [] if e.get("id") != "lccn-k8s"
            ]
            entries.append(
                {
                    "id": "lccn-k8s",
                    "vimId": access.vim_id or uid(),
                    "vimType": "kubernetes",
                    "interfaceInfo": {},
                    "accessInfo": {"authUrl": access.endpoint},
                    "extra": {},
                }
            )
            instance["vimConnectionInfo"] = entries
            return uid()
        entry = {
            "vimId": access.vim_id or uid(),
            "vimType": "ETSINFV.KUBERNETES.V_1",
            "interfaceInfo": {"endpoint": access.endpoint},
        }
        instance.setdefault("vimConnectionInfo", {})["lccn-k8s"] = entry
        return uid()

    async def clear_write_back(self, vnf_instance_id: str, *, api: str = "v1") -> None:
        self.cleared.append((vnf_instance_id, api))

    def _registers(self, api: str | None) -> bool:
        return self.register_vims if self.register_vims is not None else api == "v1"

    async def register_vim(
        self,
        name: str,
        access: KubernetesAccess,
        *,
        owner: str | None = None,
        api: str | None = None,
        replace: bool = False,
    ) -> str | None:
        if not self._registers(api):
            return None
        if name in self.vims and self.vim_owners.get(name) != owner:
            raise VimNotOurs(f"vim_name {name!r}: not registered by lccn-subscriber")
        if replace and name in self.vims:
            del self.vims[name]
        self.vim_owners[name] = owner or ""
        return self.vims.setdefault(name, uid())

    def onboard(
        self, instance_id: str, files: Mapping[str, str | bytes], vnfd_id: str = "vnfd-1"
    ) -> str:
        """Give the instance an onboarded VNF package holding ``files``; its vnfdId."""
        self.instances[instance_id]["vnfdId"] = vnfd_id
        self.packages[vnfd_id] = vnf_package(files)
        return vnfd_id

    async def vnf_package(self, vnfd_id: str, into: IO[bytes]) -> None:
        self.gets += 1
        if vnfd_id not in self.packages:
            raise PackageNotFound(f"Tacker has no onboarded VNF package with vnfdId {vnfd_id}")
        into.write(self.packages[vnfd_id])

    async def delete_vim(
        self, name: str | None, *, owner: str | None = None, api: str | None = None
    ) -> list[str]:
        if not self._registers(api):
            return []
        if name in self.vims and owner is not None and self.vim_owners.get(name) != owner:
            raise VimNotOurs(f"vim_name {name!r}: not registered by lccn-subscriber")
        doomed = [
            n
            for n in self.vims
            if (owner is not None and self.vim_owners.get(n) == owner)
            or (owner is None and n == name)
        ]
        for n in doomed:
            del self.vims[n]
            self.vim_owners.pop(n, None)
        self.deleted_vims.extend(doomed)
        return doomed


@dataclass
class FakeOpenStack:
    ports: dict[tuple[str, str], PortAddresses] = field(default_factory=dict)
    hosts: dict[str, str] = field(default_factory=dict)
    zones: dict[str, str] = field(default_factory=dict)
    anti_affinity: set[str] = field(default_factory=set)  # server ids in such a group
    volumes: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    servers: dict[str, dict[str, str]] = field(default_factory=dict)  # top stack -> server -> stack
    calls: list[tuple[str, str]] = field(default_factory=list)

    async def server_stacks(self, stack: str) -> dict[str, str]:
        self.calls.append(("server-stacks", stack))
        try:
            return dict(self.servers[stack])
        except KeyError:
            raise OpenStackNotFound(f"Heat stack {stack}: 404") from None

    async def port_addresses(self, stack_id: str, cp_name: str) -> PortAddresses:
        self.calls.append((stack_id, cp_name))
        try:
            return self.ports[(stack_id, cp_name)]
        except KeyError:
            raise OpenStackNotFound(f"Heat resource {cp_name} of stack {stack_id}: 404") from None

    async def server_host(self, server_id: str) -> str | None:
        self.calls.append(("server", server_id))
        return self.hosts.get(server_id)

    async def server_placement(self, server_id: str) -> ServerPlacement:
        self.calls.append(("placement", server_id))
        return ServerPlacement(
            host=self.hosts.get(server_id),
            availability_zone=self.zones.get(server_id, "nova"),
            anti_affinity=server_id in self.anti_affinity,
        )

    async def volume_devices(self, stack_id: str, volume_name: str) -> tuple[str, ...]:
        self.calls.append((stack_id, volume_name))
        try:
            return self.volumes[(stack_id, volume_name)]
        except KeyError:
            what = f"Heat resource {volume_name} of stack {stack_id}"
            raise OpenStackNotFound(f"{what}: 404") from None


def k8s_params(
    *,
    master_user: str = "root",
    worker_user: str = "root",
    key: str | None = None,
    password: str | None = None,
    ha: bool = False,
    cluster_fip_name: str | None = None,
) -> dict[str, Any]:
    """additionalParams in the v2 guide's shape (plus our key field)."""

    def login(user: str) -> dict[str, Any]:
        out: dict[str, Any] = {"username": user}
        if password is not None and user != "root":
            out["password"] = password
        else:
            out["ssh_private_key_path"] = key or "/nonexistent/key"
        return out

    master: dict[str, Any] = {
        "vdu_id": "masterNode",
        "ssh_cp_name": MASTER_CP,
        "nic_cp_name": MASTER_CP,
        "cluster_cp_name": VIP_CP if ha else MASTER_CP,
        "pod_cidr": "10.200.0.0/16",
        "cluster_cidr": "10.199.187.0/24",
        **login(master_user),
    }
    if cluster_fip_name:
        master["cluster_fip_name"] = cluster_fip_name
    return {
        "k8s_cluster_installation_param": {
            "script_path": "Scripts/install_k8s_cluster.sh",
            "master_node": master,
            "worker_node": {
                "vdu_id": "workerNode",
                "ssh_cp_name": WORKER_CP,
                "nic_cp_name": WORKER_CP,
                **login(worker_user),
            },
        }
    }


def host_params(hosts: Any, *, ha: bool = False) -> dict[str, Any]:
    """:func:`k8s_params` for the sshd test hosts ``hosts``: the masters log in as root with
    the client key, the workers as the hosts' sudo user with its password (root with the key
    where the hosts have no such user)."""
    return k8s_params(
        master_user="root",
        worker_user=hosts.user or "root",
        key=str(hosts.client_key),
        password=hosts.password,
        ha=ha,
    )


def with_storage_server(
    params: dict[str, Any], *, username: str, password: str, mount: str, network: str
) -> dict[str, Any]:
    """``params`` with the seeds' storage server (logging in as ``username`` with
    ``password``, sudo): the Cinder volume mounted at ``mount``, its ``nfs/pv1`` and
    ``nfs/pv2`` exported to ``network``, and the package's two NFS PVs registered."""
    params["k8s_cluster_installation_param"].update(
        storage_server={
            "ssh_cp_name": STORAGE_CP,
            "username": username,
            "password": password,
            "cinder_volume_setup_params": [
                {"volume_resource_id": "storage_server_volume", "mount_to": mount}
            ],
            "nfs_server_setup_params": [
                {"export_dir": f"{mount}/nfs/{pv}", "export_to": network} for pv in ("pv1", "pv2")
            ],
        },
        pv_registration_params=[
            {
                "pv_manifest_file_path": f"Files/kubernetes/nfs-{pv}.yaml",
                "nfs_server_cp": STORAGE_CP,
            }
            for pv in ("pv1", "pv2")
        ],
    )
    return params


def v1_params(
    *,
    master_user: str = "root",
    worker_user: str = "root",
    key: str | None = None,
    password: str | None = None,
    ha: bool = False,
    vim_name: str | None = None,
) -> dict[str, Any]:
    """additionalParams in the v1 guide's shape (seed 000): ``aspect_id`` per group, no
    ``vdu_id``, and the user-data keys the BaseHOT package needs."""
    params = k8s_params(
        master_user=master_user, worker_user=worker_user, key=key, password=password, ha=ha
    )
    block = params["k8s_cluster_installation_param"]
    for group, aspect in (("master_node", "master_instance"), ("worker_node", "worker_instance")):
        del block[group]["vdu_id"]
        block[group]["aspect_id"] = aspect
    if vim_name is not None:
        block["vim_name"] = vim_name
    return {
        **params,
        "lcm-operation-user-data": "./UserData/k8s_cluster_user_data.py",
        "lcm-operation-user-data-class": "KubernetesClusterUserData",
    }


def camel_case(value: Any) -> Any:
    """Keys as older Tacker showed a v1 instance's saved parameters (seed 000)."""
    if isinstance(value, Mapping):
        return {
            "".join(w if i == 0 else w[:1].upper() + w[1:] for i, w in enumerate(k.split("_"))): (
                camel_case(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [camel_case(v) for v in value]
    return value


def cluster_vnf(
    masters: list[str],
    workers: list[str],
    *,
    vip: str | None = None,
    params: dict[str, Any] | None = None,
    floating: dict[str, str] | None = None,
    instance_id: str | None = None,
    api: str = "v2",
) -> tuple[FakeTacker, FakeOpenStack, str, str]:
    """An instance with those VNFC addresses; returns (tacker, openstack, instance, op-occ).

    ``api="v1"``: as Tacker 16.0.0's v1 API shows a BaseHOT instance (the module's
    docstring), with :func:`v1_params` unless ``params`` are given.
    """
    instance_id = instance_id or uid()
    occ_id = uid()
    top = uid()
    v1 = api == "v1"
    top_stack = f"vnflcm_{instance_id}" if v1 else f"vnf-{instance_id}/{top}"
    tacker, openstack = FakeTacker(), FakeOpenStack()
    if v1:
        openstack.servers[top_stack] = {}
    vim_id = uid()
    vnfcs: list[dict[str, Any]] = []
    for index, (vdu, cp, ip) in enumerate(
        [("masterNode", MASTER_CP, ip) for ip in masters]
        + [("workerNode", WORKER_CP, ip) for ip in workers]
    ):
        server = uid()
        if v1:  # a member of the VDU's AutoScalingGroup, under the top stack
            stack = f"vnflcm_{instance_id}-{vdu}-{index}-{uid()[:8]}/{uid()}"
            openstack.servers[top_stack][server] = stack
        else:
            stack = f"vnf-{instance_id}-{vdu}-{index}/{uid()}"
        vnfc: dict[str, Any] = {
            "id": uid(),
            "vduId": vdu,
            "computeResource": {
                "resourceId": server,
                "vimLevelResourceType": "OS::Nova::Server",
            },
            "vnfcCpInfo": [{"id": uid(), "cpdId": cp}],
        }
        if v1:
            vnfc["computeResource"]["vimConnectionId"] = vim_id
            vnfc["storageResourceIds"] = []
        else:
            vnfc["metadata"] = {"stack_id": stack}
        vnfcs.append(vnfc)
        openstack.ports[(stack, cp)] = PortAddresses((ip,), (floating or {}).get(ip))
        openstack.hosts[server] = f"compute-{index % 3}"
    if len(masters) > 1:
        assert vip is not None
        openstack.ports[(top_stack, VIP_CP)] = PortAddresses((vip,))
    ha = len(masters) > 1
    params = params or (v1_params(ha=ha) if v1 else k8s_params(ha=ha))
    info: dict[str, Any] = {
        "flavourId": "complex" if ha else "simple",
        "vnfcResourceInfo": vnfcs,
    }
    if v1:
        info["additionalParams"] = params
        base = "http://127.0.0.1:9890/vnflcm/v1"
        tacker.instances[instance_id] = {
            "id": instance_id,
            "instantiationState": "INSTANTIATED",
            "instantiatedVnfInfo": info,
            "vimConnectionInfo": [
                {
                    "id": uid(),
                    "vimId": vim_id,
                    "vimType": "openstack",
                    "interfaceInfo": {},
                    "accessInfo": {},
                }
            ],
            "_links": {"self": {"href": f"{base}/vnf_instances/{instance_id}"}},
        }
        operation_params: Any = json.dumps(
            {"flavourId": info["flavourId"], "additionalParams": params}
        )
    else:
        info["metadata"] = {"stack_id": top}
        tacker.instances[instance_id] = {
            "id": instance_id,
            "instantiationState": "INSTANTIATED",
            "instantiatedVnfInfo": info,
            "vimConnectionInfo": {},
        }
        operation_params = {"additionalParams": params}
    tacker.op_occs[occ_id] = {
        "id": occ_id,
        "operation": "INSTANTIATE",
        "operationState": "COMPLETED",
        "vnfInstanceId": instance_id,
        "operationParams": operation_params,
    }
    return tacker, openstack, instance_id, occ_id


def stack_of(openstack: FakeOpenStack, vnfc: Mapping[str, Any]) -> str:
    """The VNFC's stack: ``metadata.stack_id`` (v2), else the one holding its server (v1)."""
    stack = (vnfc.get("metadata") or {}).get("stack_id")
    if stack:
        return str(stack)
    server = vnfc["computeResource"]["resourceId"]
    for servers in openstack.servers.values():
        if server in servers:
            return servers[server]
    raise KeyError(server)


def _v1_top(tacker: FakeTacker, openstack: FakeOpenStack, instance_id: str) -> str | None:
    top = f"vnflcm_{instance_id}"
    return top if top in openstack.servers else None


def _vnfcs(tacker: FakeTacker, instance_id: str) -> list[dict[str, Any]]:
    vnfcs: list[dict[str, Any]] = tacker.instances[instance_id]["instantiatedVnfInfo"][
        "vnfcResourceInfo"
    ]
    return vnfcs


def _vnfc_at(
    tacker: FakeTacker, openstack: FakeOpenStack, instance_id: str, ip: str
) -> dict[str, Any]:
    for vnfc in _vnfcs(tacker, instance_id):
        cp = vnfc["vnfcCpInfo"][0]["cpdId"]
        if ip in openstack.ports[(stack_of(openstack, vnfc), cp)].fixed_ips:
            return vnfc
    raise KeyError(ip)


def server_at(tacker: FakeTacker, openstack: FakeOpenStack, instance_id: str, ip: str) -> str:
    """The Nova server id of the VNFC at ``ip`` (what Tacker's grant names to remove)."""
    return str(_vnfc_at(tacker, openstack, instance_id, ip)["computeResource"]["resourceId"])


def add_worker(tacker: FakeTacker, openstack: FakeOpenStack, instance_id: str, ip: str) -> str:
    """SCALE_OUT as Tacker shows it: a new worker VNFC (its own stack and server), first."""
    stack, server, vnfc_id = f"vnf-{instance_id}-workerNode-{uid()}/{uid()}", uid(), uid()
    vnfc: dict[str, Any] = {
        "id": vnfc_id,
        "vduId": "workerNode",
        "computeResource": {"resourceId": server, "vimLevelResourceType": "OS::Nova::Server"},
        "vnfcCpInfo": [{"id": uid(), "cpdId": WORKER_CP}],
    }
    top = _v1_top(tacker, openstack, instance_id)
    if top is not None:
        openstack.servers[top][server] = stack
    else:
        vnfc["metadata"] = {"stack_id": stack}
    _vnfcs(tacker, instance_id).insert(0, vnfc)
    openstack.ports[(stack, WORKER_CP)] = PortAddresses((ip,))
    openstack.hosts[server] = "compute-9"
    return vnfc_id


def remove_vnfc(tacker: FakeTacker, openstack: FakeOpenStack, instance_id: str, ip: str) -> str:
    """SCALE_IN as Tacker shows it: the VNFC at ``ip`` and its stack are gone."""
    vnfc = _vnfc_at(tacker, openstack, instance_id, ip)
    _vnfcs(tacker, instance_id).remove(vnfc)
    del openstack.ports[(stack_of(openstack, vnfc), vnfc["vnfcCpInfo"][0]["cpdId"])]
    top = _v1_top(tacker, openstack, instance_id)
    if top is not None:
        del openstack.servers[top][vnfc["computeResource"]["resourceId"]]
    return str(vnfc["id"])


def rebuild_vnfc(tacker: FakeTacker, openstack: FakeOpenStack, instance_id: str, ip: str) -> str:
    """HEAL of one VNFC as Tacker shows it: a new server (v2: and a new VNFC id), same
    stack and port."""
    vnfc = _vnfc_at(tacker, openstack, instance_id, ip)
    server = uid()
    top = _v1_top(tacker, openstack, instance_id)
    if top is not None:
        openstack.servers[top][server] = openstack.servers[top].pop(
            vnfc["computeResource"]["resourceId"]
        )
    if top is None:  # v2 gives the healed VNFC a new id; v1 keeps it
        vnfc["id"] = uid()
    vnfc["computeResource"] = {**vnfc["computeResource"], "resourceId": server}
    openstack.hosts[server] = "compute-8"
    return str(vnfc["id"])


def lcm_op_occ(
    tacker: FakeTacker,
    instance_id: str,
    operation: str,
    params: dict[str, Any] | None = None,
    *,
    request: dict[str, Any] | None = None,
) -> str:
    """A COMPLETED op-occ of ``operation``; without ``params`` its request repeats none
    (Tacker's bed sends scale and heal requests so). ``request``: more of the request
    (``vnfcInstanceId`` of a HEAL ...). A v1 instance's op-occ shows it as JSON text."""
    occ_id = uid()
    operation_params: Any = {**(request or {}), **({"additionalParams": params} if params else {})}
    links = tacker.instances.get(instance_id, {}).get("_links") or {}
    if "/vnflcm/v1/" in str((links.get("self") or {}).get("href", "")):
        operation_params = json.dumps(operation_params)
    tacker.op_occs[occ_id] = {
        "id": occ_id,
        "operation": operation,
        "operationState": "COMPLETED",
        "vnfInstanceId": instance_id,
        "operationParams": operation_params,
    }
    return occ_id
