"""What handlers need from the outside world, as small protocols and their values.

Handlers reach Tacker, OpenStack, the VMs and the cluster inventory only
through these (see :class:`subscriber.kernel.context.Services`). The adapters
implement them (``subscriber.tacker``, ``subscriber.openstack``,
``subscriber.ssh``, ``subscriber.store.inventory``) and import their values
from here, so neither side imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol, TypedDict, Unpack, runtime_checkable

from pydantic import SecretStr

from subscriber.errors import CommandFailed
from subscriber.redact import mask_secrets

__all__ = [
    "ApiVersion",
    "ClusterInventory",
    "ClusterNode",
    "CommandResult",
    "HandBack",
    "KeyValues",
    "KubernetesAccess",
    "OpenStackLookups",
    "PortAddresses",
    "RunOptions",
    "ServerPlacement",
    "SshExecutor",
    "SshTarget",
    "TackerApi",
    "UploadOptions",
]

ApiVersion = Literal["v1", "v2"]


# ------------------------------------------------------------------- Tacker


@dataclass(frozen=True, slots=True)
class KubernetesAccess:
    """How to reach a cluster: what goes into a ``ETSINFV.KUBERNETES.V_1`` vimConnectionInfo."""

    endpoint: str  # https://<ip>:6443, or :16443 behind the HA VIP
    ssl_ca_cert: str  # PEM
    bearer_token: SecretStr
    vim_id: str | None = None


class TackerApi(Protocol):
    """Tacker's VNF LCM API as the handlers use it.

    Each instance is read and written through the API it was made with: ``api``
    names it (``None``: the client's configured ``tacker.api_version``).
    """

    async def get_vnf_instance(
        self, vnf_instance_id: str, *, api: ApiVersion | None = None
    ) -> dict[str, Any]:
        """``GET vnf_instances/{id}`` (v2 strips the secrets; v1 shows the entries as
        they were written)."""
        ...

    async def get_op_occ(self, op_occ_id: str, *, api: ApiVersion | None = None) -> dict[str, Any]:
        """``GET vnf_lcm_op_occs/{id}``; ``operationParams.additionalParams`` hold our params
        (v1 shows ``operationParams`` as JSON text: see :func:`schemas.lcm.operation_params`)."""
        ...

    async def list_op_occs(
        self, filter: str | None = None, *, api: ApiVersion | None = None
    ) -> list[dict[str, Any]]:
        """``GET vnf_lcm_op_occs?filter=...`` (every page)."""
        ...

    async def write_back(
        self, vnf_instance_id: str, access: KubernetesAccess, *, api: ApiVersion = "v2"
    ) -> str:
        """PATCH our Kubernetes entry into ``vimConnectionInfo`` and wait for its MODIFY_INFO.

        v2: a ``ETSINFV.KUBERNETES.V_1`` entry of the map, with the endpoint, CA and
        token. v1: an entry appended to the list, ``vimType: kubernetes`` with the
        endpoint as ``accessInfo.authUrl`` and the VIM's id (the token and CA live in
        the VIM, as with Tacker's v1 driver: v1 shows entries and requests unmasked).

        Returns the MODIFY_INFO op-occ id (recorded so its notifications are
        recognised as our own echo). Raises a retriable error on 409/5xx past
        the client's own retries, a permanent one if Tacker fails the op-occ.
        """
        ...

    async def clear_write_back(self, vnf_instance_id: str, *, api: ApiVersion = "v1") -> None:
        """Remove our entry (v1 only: v2 resets vimConnectionInfo itself at TERMINATE)."""
        ...

    async def register_vim(
        self,
        name: str,
        access: KubernetesAccess,
        *,
        owner: str,
        api: ApiVersion | None = None,
        replace: bool = False,
    ) -> str | None:
        """``POST /v1.0/vims`` (type kubernetes); the VIM id, or None when registration is
        off for ``api`` (``tacker.register_vim``: by default on for v1 instances only).

        ``owner`` is the VNF instance: a same-named VIM is reused (or, with
        ``replace``, registered anew: new credentials) only when we registered it for
        that instance; otherwise a permanent error.
        """
        ...

    async def delete_vim(
        self, name: str | None, *, owner: str, api: ApiVersion | None = None
    ) -> list[str]:
        """Delete the VIMs we registered for ``owner`` (whatever their name) and, given a
        ``name``, refuse if a VIM of that name is someone else's (a permanent error,
        nothing deleted). The names deleted; empty when there were none or registration
        is off for ``api``."""
        ...

    async def vnf_package(self, vnfd_id: str, into: IO[bytes]) -> None:
        """Write the zip of the onboarded VNF package whose VNFD is ``vnfd_id`` into ``into``.

        Raises :class:`~subscriber.errors.PackageNotFound` when no onboarded package has
        that VNFD, a permanent error when it is larger than the client allows.
        """
        ...


# ---------------------------------------------------------------- OpenStack


@dataclass(frozen=True, slots=True)
class PortAddresses:
    """A connection point's addresses as Heat reports them."""

    fixed_ips: tuple[str, ...]
    floating_ip: str | None = None


@dataclass(frozen=True, slots=True)
class ServerPlacement:
    """Where Nova put a server: what node labels are made of."""

    host: str | None = None  # OS-EXT-SRV-ATTR:host (None when policy hides it)
    availability_zone: str | None = None  # OS-EXT-AZ:availability_zone
    anti_affinity: bool = False  # a member of a server group with the anti-affinity policy


class OpenStackLookups(Protocol):
    """Heat and Nova reads (openstacksdk, run off the event loop)."""

    async def port_addresses(self, stack_id: str, cp_name: str) -> PortAddresses:
        """``GET stacks/{stack_id}/resources/{cp_name}`` -> fixed_ips / floating_ip_address."""
        ...

    async def server_stacks(self, stack: str) -> dict[str, str]:
        """Every Nova server under ``stack`` (a name or name/id, nested stacks included):
        server id -> the ``name/id`` of the stack that holds it (and its ports).

        What v1 discovery uses: v1 shows a VNFC's server (``computeResource.resourceId``),
        not its stack.
        """
        ...

    async def server_host(self, server_id: str) -> str | None:
        """Nova's ``OS-EXT-SRV-ATTR:host`` of a server (the compute host)."""
        ...

    async def server_placement(self, server_id: str) -> ServerPlacement:
        """The server's compute host, availability zone and anti-affinity group membership."""
        ...

    async def volume_devices(self, stack_id: str, volume_name: str) -> tuple[str, ...]:
        """``GET stacks/{stack_id}/resources/{volume_name}`` -> each attachment's device."""
        ...


# ---------------------------------------------------------------------- SSH


@dataclass(frozen=True, slots=True, kw_only=True)
class SshTarget:
    """Where, as whom and with what to log in.

    Two targets are equal only with the same credentials: the pool shares a
    connection only between jobs presenting the same password, keys and pinned
    host keys (it compares them by a keyed digest, never shown).

    Arguments:
        host: address or name of the VM (Tacker's ``ssh_cp_name`` IP).
        username: login user; commands run with ``sudo=True`` go through sudo
            unless this is ``root``.
        port: SSH port; ``None`` takes the executor's default.
        password: for password authentication and ``sudo -S``.
        client_keys: the parameters' private key files (``ssh_private_key_path``),
            read only inside ``ssh.key_dir``. The executor's own keys are offered
            only to a target with neither these nor a password.
        known_hosts: extra OpenSSH known_hosts lines trusted for this target
            (e.g. pinned in the VNF's parameters).
        origin: where the credentials come from, named in messages
            (``k8s_cluster_installation_param.master_node``).
    """

    host: str
    username: str = "root"
    port: int | None = None
    password: SecretStr | None = field(default=None, repr=False)
    client_keys: tuple[Path, ...] = ()
    known_hosts: str | None = field(default=None, repr=False)
    origin: str = field(default="", compare=False)

    def describe(self, default_port: int = 22) -> str:
        return f"{self.username}@{self.host}:{self.port or default_port}"


@dataclass(frozen=True, slots=True)
class CommandResult:
    """The outcome of one command.

    ``stdout``/``stderr`` are the *tails* of the streams (at most
    ``max_output_bytes`` each, decoded as UTF-8 with replacement), raw, for the
    step to parse; ``command`` is the redacted form, for messages.
    """

    host: str
    command: str
    exit_status: int | None
    stdout: str
    stderr: str
    duration: float
    exit_signal: str | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    secrets: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def redacted(self, text: str) -> str:
        """``text`` with this command's secrets and secret-looking values masked."""
        return mask_secrets(text, self.secrets)

    def check(self, *, step: str | None = None) -> CommandResult:
        """Return ``self`` if the command exited 0, else raise.

        Raises:
            CommandFailed: with the exit status and the redacted stderr tail
                (stdout's when stderr is empty).
        """
        if self.ok:
            return self
        status = f"signal {self.exit_signal}" if self.exit_signal else f"exit {self.exit_status}"
        tail = (self.stderr.strip() or self.stdout.strip())[-800:]
        message = f"{self.command!r} on {self.host} failed ({status})"
        if tail:
            message += f": {self.redacted(tail)}"
        raise CommandFailed(message, host=self.host, step=step, result=self)


class RunOptions(TypedDict, total=False):
    """The keyword options of :meth:`SshExecutor.run`, documented at ``AsyncSsh.run``.

    Wrappers and fakes take them as ``**options: Unpack[RunOptions]`` and pass them
    on whole, so the option list is written once beside the real executor's
    (likewise :class:`UploadOptions`).
    """

    command_timeout: float | None
    sudo: bool
    input: str | bytes | None
    env: Mapping[str, str] | None
    secrets: Sequence[str]


class UploadOptions(TypedDict, total=False):
    """The keyword options of :meth:`SshExecutor.upload`, documented at ``AsyncSsh.upload``."""

    mode: int
    upload_timeout: float | None


@runtime_checkable
class SshExecutor(Protocol):
    """What handlers need from SSH (the seam for in-memory fakes)."""

    async def run(
        self, target: SshTarget, command: str, **options: Unpack[RunOptions]
    ) -> CommandResult: ...

    async def upload(
        self,
        target: SshTarget,
        source: bytes | str | Path,
        remote_path: str,
        **options: Unpack[UploadOptions],
    ) -> None: ...


# --------------------------------------------------------------- inventory


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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterNode:
        """The inverse of :meth:`as_json` (a checkpointed discovery result)."""
        role = data["role"]
        if role not in ("master", "worker"):
            raise ValueError(f"not a node role: {role!r}")
        return cls(
            name=str(data["name"]),
            role=role,
            vnfc_id=str(data["vnfcId"]),
            nic_ip=str(data["nicIp"]),
            ssh_ip=str(data["sshIp"]),
            vdu_id=data.get("vduId"),
            stack_id=data.get("stackId"),
            server_id=data.get("serverId"),
            compute_host=data.get("computeHost"),
            cluster_ip=data.get("clusterIp"),
        )


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


# ------------------------------------------------------------------- the store's small values


class KeyValues(Protocol):
    """Small named values kept in the store (``store.tacker``): the hooks' requests."""

    async def get_value(self, key: str) -> str | None:
        """The value under ``key``, or ``None``."""
        ...


class HandBack(Protocol):
    """What a job run by a management-driver hook hands back to it (Tacker's script
    returns it inside the operation), kept sealed: it holds the bearer token."""

    async def hand_back(
        self, op_occ_id: str, vnf_instance_id: str, access: KubernetesAccess
    ) -> None:
        """Hand our ``vimConnectionInfo`` entry for ``access`` to the op-occ's hook."""
        ...
