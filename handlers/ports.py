"""What the cluster handlers need from the outside world, as small protocols.

Handlers reach Tacker, OpenStack and the VMs only through these, found in
``JobContext.services`` under the names below. ``serve`` wires the real
clients; unit tests inject in-memory fakes; integration tests use the real
Tacker, the simulated OpenStack and real sshd hosts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import SecretStr

__all__ = [
    "OPENSTACK",
    "SSH",
    "TACKER",
    "KubernetesAccess",
    "OpenStackLookups",
    "PortAddresses",
    "TackerApi",
]

TACKER = "tacker"
OPENSTACK = "openstack"
SSH = "ssh"

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
