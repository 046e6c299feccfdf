"""Node discovery: which VNFC VMs make the cluster, their addresses and names.

The way Tacker's drivers find them (TACKER.md §1.4):

* VNFCs from ``instantiatedVnfInfo.vnfcResourceInfo`` (``GET vnf_instances``),
  those of ``master_node.vdu_id`` / ``worker_node.vdu_id``; without a
  ``vdu_id`` (v1), those with a CP named ``ssh_cp_name``;
* each VNFC's stack (:class:`VnfcStacks`): v2 names it, ``metadata.stack_id``; v1
  shows only the VNFC's Nova server (``computeResource.resourceId``), so its stack
  is the one holding that server under the instance's top stack ``vnflcm_{id}``
  (an AutoScalingGroup member's nested stack with ``aspect_id``, else the top
  stack itself). Its ``nic_cp_name`` port's first fixed IP is the node's address,
  its ``ssh_cp_name`` port's floating IP (else fixed IP) is where we SSH to;
* the cluster IP is ``cluster_cp_name``'s fixed IP in the top stack (v2
  ``vnf-{id}/{instantiatedVnfInfo.metadata.stack_id}``, v1 ``vnflcm_{id}``) when
  there are several masters (the VIP port), else in the master's own stack;
  ``cluster_fip_name`` gives the floating IP the VIM is registered with;
* the compute host from Nova (``OS-EXT-SRV-ATTR:host``).

Node names are ``master``/``worker`` + the last octet of the NIC address, as the
seeds' clusters show. Masters are ordered by address, so the main master
(the first) is the same on every run; healing changes VNFC ids, so nodes are
keyed by name (that is, address), never by VNFC id.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from schemas.cluster_params import ApiVersion, K8sClusterInstallationParams, NodeParams
from subscriber.errors import DiscoveryError
from subscriber.kernel.ports import ClusterNode, OpenStackLookups, PortAddresses

__all__ = [
    "API_PORT",
    "HA_PORT",
    "Topology",
    "VnfcStacks",
    "checked_node_name",
    "discover",
    "ip_address_of",
    "node_name",
]

HA_PORT = 16443
API_PORT = 6443


@dataclass(frozen=True, slots=True)
class Topology:
    """The discovered cluster: masters (main master first), workers, addresses."""

    masters: tuple[ClusterNode, ...]
    workers: tuple[ClusterNode, ...]
    cluster_ip: str  # the address nodes join: the VIP (HA) or the master's NIC IP
    cluster_fip: str | None = None  # the floating IP of cluster_fip_name, if any

    @property
    def ha(self) -> bool:
        return len(self.masters) > 1

    @property
    def main(self) -> ClusterNode:
        return self.masters[0]

    @property
    def nodes(self) -> tuple[ClusterNode, ...]:
        return self.masters + self.workers

    @property
    def endpoint(self) -> str:
        """The API URL for the VIM: the cluster FIP if any, the VIP:16443 (HA), else :6443."""
        port = HA_PORT if self.ha else API_PORT
        host = self.cluster_fip or (self.cluster_ip if self.ha else self.main.nic_ip)
        return f"https://{host}:{port}"

    def as_json(self) -> dict[str, Any]:
        return {
            "masters": [n.as_json() for n in self.masters],
            "workers": [n.as_json() for n in self.workers],
            "clusterIp": self.cluster_ip,
            "clusterFip": self.cluster_fip,
            "endpoint": self.endpoint,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Topology:
        """The inverse of :meth:`as_json` (the ``discover`` step's checkpointed result)."""
        return cls(
            masters=tuple(ClusterNode.from_json(n) for n in data["masters"]),
            workers=tuple(ClusterNode.from_json(n) for n in data["workers"]),
            cluster_ip=str(data["clusterIp"]),
            cluster_fip=data.get("clusterFip"),
        )

    def node(self, name: str) -> ClusterNode:
        """The node called ``name``.

        Raises:
            KeyError: no such node.
        """
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)


def node_name(role: str, nic_ip: str) -> str:
    """``master``/``worker`` + the last octet of the NIC address (Tacker's names)."""
    return f"{role}{nic_ip.rsplit('.', 1)[-1]}"


# A Kubernetes node name that is also a hostname and an /etc/hosts name: one DNS label.
_NODE_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def ip_address_of(value: object, what: str) -> str:
    """``value`` as an IP address (canonical text), else a permanent error naming ``what``.

    What Heat and Nova report goes into ``/etc/hosts``, haproxy.cfg, a systemd drop-in
    and command lines: nothing else may get there. The value itself is not echoed.

    Raises:
        DiscoveryError: not an IP address (an IPv6 scope, ``%...``, is refused too).
    """
    text = str(value)
    try:
        if "%" in text:
            raise ValueError(text)
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise DiscoveryError(
            f"{what}: the address Heat reports is not an IP address; nothing was written"
        ) from None


def checked_node_name(name: str, what: str) -> str:
    """``name`` if it is a DNS label (a node name kubeadm and /etc/hosts take as is).

    Raises:
        DiscoveryError: it is not.
    """
    if not _NODE_NAME.fullmatch(name):
        raise DiscoveryError(
            f"{what}: node name {name!r} is not a DNS label (lower-case letters, digits, '-')"
        )
    return name


def _ip_key(node: ClusterNode) -> tuple[int, str]:
    try:
        return int(ipaddress.ip_address(node.nic_ip)), node.nic_ip
    except ValueError:
        return 0, node.nic_ip


def _select(vnfcs: list[Mapping[str, Any]], group: NodeParams) -> list[Mapping[str, Any]]:
    if group.vdu_id is not None:
        return [v for v in vnfcs if v.get("vduId") == group.vdu_id]
    return [
        v
        for v in vnfcs
        if any(cp.get("cpdId") == group.ssh_cp_name for cp in v.get("vnfcCpInfo") or ())
    ]


def v1_top_stack(instance_id: str) -> str:
    """The Heat stack Tacker's v1 API makes for an instance (BaseHOT + user data)."""
    return f"vnflcm_{instance_id}"


class VnfcStacks:
    """The Heat stack of each VNFC of one instance, and of the instance itself.

    v2 names them (``metadata.stack_id``); v1 does not, and the servers' stacks are
    then read once from Heat (:meth:`OpenStackLookups.server_stacks`).
    """

    def __init__(
        self, instance: Mapping[str, Any], openstack: OpenStackLookups, api: ApiVersion
    ) -> None:
        self._instance = instance
        self._openstack = openstack
        self._api = api
        self._servers: dict[str, str] | None = None
        self._lock = asyncio.Lock()

    @property
    def instance_id(self) -> str:
        return str(self._instance.get("id", ""))

    def top(self) -> str:
        """The instance's top stack: ``vnf-{id}/{metadata.stack_id}`` (v2) or ``vnflcm_{id}``.

        Raises:
            DiscoveryError: a v2 instance without ``instantiatedVnfInfo.metadata.stack_id``.
        """
        if self._api == "v1":
            return v1_top_stack(self.instance_id)
        info = self._instance.get("instantiatedVnfInfo") or {}
        top_id = (info.get("metadata") or {}).get("stack_id")
        if not top_id:
            raise DiscoveryError(
                f"VNF instance {self.instance_id} has no instantiatedVnfInfo.metadata.stack_id "
                "(its top stack)"
            )
        return f"vnf-{self.instance_id}/{top_id}"

    async def of(self, vnfc: Mapping[str, Any]) -> str:
        """The stack holding the VNFC's server and ports.

        Raises:
            DiscoveryError: the VNFC names no stack and no server of the instance's stack.
        """
        stack_id = (vnfc.get("metadata") or {}).get("stack_id")
        if stack_id:
            return str(stack_id)
        server_id = (vnfc.get("computeResource") or {}).get("resourceId")
        what = f"VNFC {vnfc.get('id', '')} ({vnfc.get('vduId')})"
        if not server_id:
            raise DiscoveryError(
                f"{what} has neither metadata.stack_id nor computeResource.resourceId: "
                "its VM cannot be found in Heat"
            )
        async with self._lock:
            if self._servers is None:
                self._servers = await self._openstack.server_stacks(self.top())
        found = self._servers.get(str(server_id))
        if found is None:
            raise DiscoveryError(
                f"{what}: its server {server_id} is in no stack of {self.top()} "
                "(and the VNFC has no metadata.stack_id)"
            )
        return found


def _first_fixed(ports: PortAddresses, what: str) -> str:
    if not ports.fixed_ips:
        raise DiscoveryError(f"{what} has no fixed IP in Heat")
    return ip_address_of(ports.fixed_ips[0], what)


def _reachable(ports: PortAddresses, what: str) -> str:
    """The port's floating IP, else its first fixed IP."""
    if ports.floating_ip:
        return ip_address_of(ports.floating_ip, f"{what} (floating IP)")
    return _first_fixed(ports, what)


async def _node(
    openstack: OpenStackLookups,
    stacks: VnfcStacks,
    vnfc: Mapping[str, Any],
    group: NodeParams,
    role: Literal["master", "worker"],
) -> ClusterNode:
    vnfc_id = str(vnfc.get("id", ""))
    stack_id = await stacks.of(vnfc)
    nic_cp = group.nic_cp
    nic = await openstack.port_addresses(stack_id, nic_cp)
    nic_ip = _first_fixed(nic, f"{nic_cp} of VNFC {vnfc_id}")
    ssh = nic if group.ssh_cp_name == nic_cp else None
    if ssh is None:
        ssh = await openstack.port_addresses(stack_id, group.ssh_cp_name)
    ssh_ip = _reachable(ssh, f"{group.ssh_cp_name} of VNFC {vnfc_id}")
    server_id = (vnfc.get("computeResource") or {}).get("resourceId")
    host = await openstack.server_host(server_id) if server_id else None
    return ClusterNode(
        name=checked_node_name(node_name(role, nic_ip), f"{nic_cp} of VNFC {vnfc_id}"),
        role=role,
        vnfc_id=vnfc_id,
        nic_ip=nic_ip,
        ssh_ip=ssh_ip,
        vdu_id=vnfc.get("vduId"),
        stack_id=stack_id,
        server_id=server_id,
        compute_host=host,
    )


async def discover(
    instance: Mapping[str, Any],
    params: K8sClusterInstallationParams,
    openstack: OpenStackLookups,
) -> Topology:
    """The cluster's nodes and addresses, from the instance and Heat/Nova.

    Arguments:
        instance: ``GET vnf_instances/{id}`` (instantiated).
        params: the operation's parameters.
        openstack: Heat/Nova lookups.

    Raises:
        DiscoveryError: not instantiated, no master VNFC, a port without an
            address, two nodes with the same name (permanent).
        OpenStackError: from the lookups (transient when OpenStack is down).
    """
    instance_id = str(instance.get("id", ""))
    info = instance.get("instantiatedVnfInfo") or {}
    vnfcs: list[Mapping[str, Any]] = list(info.get("vnfcResourceInfo") or [])
    if not vnfcs:
        raise DiscoveryError(f"VNF instance {instance_id} has no vnfcResourceInfo")
    master_vnfcs = _select(vnfcs, params.master_node)
    worker_vnfcs = _select(vnfcs, params.worker_node)
    if not master_vnfcs:
        which = params.master_node.vdu_id or params.master_node.ssh_cp_name
        raise DiscoveryError(f"VNF instance {instance_id} has no master VNFC ({which})")
    stacks = VnfcStacks(instance, openstack, params.api_version)
    masters, workers = await asyncio.gather(
        asyncio.gather(
            *(_node(openstack, stacks, v, params.master_node, "master") for v in master_vnfcs)
        ),
        asyncio.gather(
            *(_node(openstack, stacks, v, params.worker_node, "worker") for v in worker_vnfcs)
        ),
    )
    ordered_masters = sorted(masters, key=_ip_key)
    ordered_workers = sorted(workers, key=_ip_key)
    names = [n.name for n in (*ordered_masters, *ordered_workers)]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise DiscoveryError(f"two VNFCs would be the same node: {', '.join(dupes)}")

    master = params.master_node
    # The VIP port of an HA cluster is in the top stack; a single master's CP in its own.
    stack = stacks.top() if len(ordered_masters) > 1 else ordered_masters[0].stack_id or ""
    cluster_port = await openstack.port_addresses(stack, master.cluster_cp_name)
    cluster_ip = _first_fixed(cluster_port, f"cluster CP {master.cluster_cp_name}")
    cluster_fip: str | None = None
    if master.cluster_fip_name:
        fip_port = await openstack.port_addresses(stack, master.cluster_fip_name)
        if fip_port.floating_ip is None and not fip_port.fixed_ips:
            raise DiscoveryError(f"cluster_fip_name {master.cluster_fip_name} has no address")
        cluster_fip = _reachable(fip_port, f"cluster_fip_name {master.cluster_fip_name}")

    def with_cluster(n: ClusterNode) -> ClusterNode:
        return dataclasses.replace(n, cluster_ip=cluster_ip)

    return Topology(
        masters=tuple(with_cluster(n) for n in ordered_masters),
        workers=tuple(with_cluster(n) for n in ordered_workers),
        cluster_ip=cluster_ip,
        cluster_fip=cluster_fip,
    )
