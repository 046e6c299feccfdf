"""What the cluster handlers need from the outside world, as small protocols.

Handlers reach Tacker, OpenStack and the VMs only through these, found in
``JobContext.services`` under the names below. ``serve`` wires the real
clients; unit tests inject in-memory fakes; integration tests use the real
Tacker, the simulated OpenStack and real sshd hosts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import SecretStr

__all__ = [
    "INVENTORY",
    "OPENSTACK",
    "SSH",
    "TACKER",
    "ClusterInventory",
    "ClusterNode",
    "KubernetesAccess",
    "OpenStackLookups",
    "PortAddresses",
    "TackerApi",
]

TACKER = "tacker"
OPENSTACK = "openstack"
SSH = "ssh"
INVENTORY = "inventory"

ApiVersion = Literal["v1", "v2"]


@dataclass(frozen=True, slots=True)
class KubernetesAccess:
    """How to reach a cluster: what goes into a ``ETSINFV.KUBERNETES.V_1`` vimConnectionInfo."""

    endpoint: str  # https://<ip>:6443, or :16443 behind the HA VIP
    ssl_ca_cert: str  # PEM
    bearer_token: SecretStr
    vim_id: str | None = None


@dataclass(frozen=True, slots=True)
class PortAddresses:
    """A connection point's addresses as Heat reports them."""

    fixed_ips: tuple[str, ...]
    floating_ip: str | None = None


class TackerApi(Protocol):
    """Tacker's VNF LCM API as the handlers use it (v2 where v1 differs, ``api`` says which)."""

    async def get_vnf_instance(self, vnf_instance_id: str) -> dict[str, Any]:
        """``GET vnf_instances/{id}`` (secrets are stripped by Tacker)."""
        ...

    async def get_op_occ(self, op_occ_id: str) -> dict[str, Any]:
        """``GET vnf_lcm_op_occs/{id}``; ``operationParams.additionalParams`` hold our params."""
        ...

    async def write_back(
        self, vnf_instance_id: str, access: KubernetesAccess, *, api: ApiVersion = "v2"
    ) -> str:
        """PATCH our Kubernetes entry into ``vimConnectionInfo`` and wait for its MODIFY_INFO.

        Returns the MODIFY_INFO op-occ id (recorded so its notifications are
        recognised as our own echo). Raises a retriable error on 409/5xx past
        the client's own retries, a permanent one if Tacker fails the op-occ.
        """
        ...

    async def clear_write_back(self, vnf_instance_id: str, *, api: ApiVersion = "v1") -> None:
        """Remove our entry (v1 only: v2 resets vimConnectionInfo itself at TERMINATE)."""
        ...

    async def register_vim(self, name: str, access: KubernetesAccess) -> str | None:
        """``POST /v1.0/vims`` (type kubernetes); the VIM id, or None when registration is off."""
        ...

    async def delete_vim(self, name: str) -> bool:
        """Delete the VIM registered under ``name``; False if there was none."""
        ...


class OpenStackLookups(Protocol):
    """Heat and Nova reads (openstacksdk, run off the event loop)."""

    async def port_addresses(self, stack_id: str, cp_name: str) -> PortAddresses:
        """``GET stacks/{stack_id}/resources/{cp_name}`` -> fixed_ips / floating_ip_address."""
        ...

    async def server_host(self, server_id: str) -> str | None:
        """Nova's ``OS-EXT-SRV-ATTR:host`` of a server (the compute host)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterNode:
    """One Kubernetes node on a VNFC VM, as discovered (no secrets).

    ``name`` is Tacker's ``master``/``worker`` + the last octet of ``nic_ip``;
    ``ssh_ip`` is the ssh CP's floating IP when it has one, else its fixed IP;
    ``cluster_ip`` is the address nodes join (the VIP for HA).
    """

    name: str
    role: Literal["master", "worker"]
    vnfc_id: str
    nic_ip: str
    ssh_ip: str
    vdu_id: str | None = None
    stack_id: str | None = None
    server_id: str | None = None
    compute_host: str | None = None
    cluster_ip: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "vnfcId": self.vnfc_id,
            "nicIp": self.nic_ip,
            "sshIp": self.ssh_ip,
            "vduId": self.vdu_id,
            "stackId": self.stack_id,
            "serverId": self.server_id,
            "computeHost": self.compute_host,
            "clusterIp": self.cluster_ip,
        }


class ClusterInventory(Protocol):
    """The stored nodes of each VNF instance's cluster (``store.inventory``)."""

    async def replace(self, vnf_instance_id: str, nodes: Sequence[ClusterNode]) -> None:
        """Make the instance's inventory exactly ``nodes``."""
        ...

    async def nodes(self, vnf_instance_id: str) -> list[ClusterNode]:
        """The instance's nodes, masters first, by name."""
        ...

    async def forget(self, vnf_instance_id: str) -> int:
        """Delete the instance's inventory; the number of nodes removed."""
        ...
