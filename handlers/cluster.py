"""What the cluster handlers share: their services, parameters and node commands.

A :class:`ClusterJob` is built once per job run, in memory (it holds the
parameters, passwords included, which are never put in step results, logs or
errors): the clients from ``ctx.services``, the parsed
``k8s_cluster_installation_param`` and, after discovery, the cluster's nodes.

Parameters come from the op-occ at hand (``GET vnf_lcm_op_occs/{id}``,
``operationParams.additionalParams``), else from the parameters the instance
saved at instantiation (v1 behaviour for scale/heal requests that omit them).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from handlers.base import JobContext
from handlers.ports import (
    INVENTORY,
    OPENSTACK,
    SSH,
    TACKER,
    ApiVersion,
    ClusterInventory,
    ClusterNode,
    OpenStackLookups,
    TackerApi,
)
from schemas import VnfLcmOperationOccurrenceNotification
from schemas.cluster_params import (
    PARAM_KEY,
    ClusterParamsError,
    K8sClusterInstallationParams,
    NodeParams,
    apply_credential_overrides,
    parse_cluster_params,
)
from subscriber.config import ClusterSettings
from subscriber.errors import PermanentStepError
from subscriber.ssh import CommandResult, SshExecutor, SshTarget

__all__ = [
    "ADMIN_CONF",
    "ClusterJob",
    "Topology",
    "api_version",
    "load_params",
    "require",
    "scripts_dir",
]

ADMIN_CONF = "/etc/kubernetes/admin.conf"
REMOTE_SCRIPT = "/tmp/install_k8s_cluster.sh"
REMOTE_TOKEN_YAML = "/tmp/create_admin_token.yaml"
TOKEN_SECRET = "default-token-k8svim"
TOKEN_NAMESPACE = "default"
HA_PORT = 16443
API_PORT = 6443


def scripts_dir(settings: ClusterSettings) -> Path:
    """The node-side scripts: configured, or those shipped with lccn-subscriber."""
    if settings.scripts_dir is not None:
        return settings.scripts_dir
    return Path(__file__).resolve().parents[1] / "scripts"


def require(ctx: JobContext, name: str) -> Any:
    """The service ``name`` from the job's services.

    Raises:
        PermanentStepError: it is not configured (says which setting is missing).
    """
    service = ctx.services.get(name)
    if service is None:
        raise PermanentStepError(
            f"the {name!r} service is not configured: the cluster handlers need "
            "tacker, openstack and ssh (see the tacker.*, openstack.* and ssh.* settings)",
            vnf_instance_id=ctx.vnf_instance_id,
            job_id=ctx.job_id,
        )
    return service


def api_version(ctx: JobContext) -> ApiVersion:
    """The VNF LCM API version of the notification (its links say ``/vnflcm/v1/``)."""
    n = ctx.notification
    if (
        isinstance(n, VnfLcmOperationOccurrenceNotification)
        and "/vnflcm/v1/" in n.links.vnfInstance.href
    ):
        return "v1"
    return "v2"


def _additional_params(data: Mapping[str, Any] | None, *path: str) -> Mapping[str, Any] | None:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data if isinstance(data, Mapping) else None


async def load_params(
    ctx: JobContext, tacker: TackerApi, api: ApiVersion
) -> K8sClusterInstallationParams:
    """The operation's ``k8s_cluster_installation_param``, else the instance's saved ones.

    v1 scale/heal requests may carry ``master_node_username``/``_password``
    overrides on top of the saved parameters.

    Raises:
        PermanentStepError: no parameters anywhere, or invalid ones (each bad
            field named, no value echoed).
    """
    n = ctx.notification
    assert isinstance(n, VnfLcmOperationOccurrenceNotification)
    occ = await tacker.get_op_occ(n.vnfLcmOpOccId)
    request = _additional_params(occ, "operationParams", "additionalParams") or {}
    try:
        if PARAM_KEY in request:
            return parse_cluster_params(request, api=api)
        instance = await tacker.get_vnf_instance(ctx.vnf_instance_id)
        saved = _additional_params(
            instance, "instantiatedVnfInfo", "additionalParams"
        ) or _additional_params(instance, "additionalParams")
        if not saved or PARAM_KEY not in saved:
            raise PermanentStepError(
                f"neither the {n.operation.value} request ({n.vnfLcmOpOccId}) nor the "
                f"instance's saved additionalParams carry {PARAM_KEY}",
                vnf_instance_id=ctx.vnf_instance_id,
                job_id=ctx.job_id,
            )
        params = parse_cluster_params(saved, api=api)
        return apply_credential_overrides(params, request)
    except ClusterParamsError as exc:
        raise PermanentStepError(
            str(exc), vnf_instance_id=ctx.vnf_instance_id, job_id=ctx.job_id
        ) from None


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


@dataclass
class ClusterJob:
    """One job's view of its cluster (in memory only: it holds passwords)."""

    ctx: JobContext
    settings: ClusterSettings
    api: ApiVersion
    params: K8sClusterInstallationParams
    topology: Topology | None = None
    _ssh: SshExecutor | None = field(default=None, repr=False)

    # -- services -------------------------------------------------------------

    @property
    def tacker(self) -> TackerApi:
        service: TackerApi = require(self.ctx, TACKER)
        return service

    @property
    def openstack(self) -> OpenStackLookups:
        service: OpenStackLookups = require(self.ctx, OPENSTACK)
        return service

    @property
    def inventory(self) -> ClusterInventory:
        service: ClusterInventory = require(self.ctx, INVENTORY)
        return service

    @property
    def ssh(self) -> SshExecutor:
        if self._ssh is None:
            self._ssh = require(self.ctx, SSH)
        return self._ssh

    @property
    def topo(self) -> Topology:
        if self.topology is None:
            raise RuntimeError("the cluster's nodes are not discovered yet")
        return self.topology

    # -- nodes ------------------------------------------------------------------

    def group(self, node: ClusterNode) -> NodeParams:
        return self.params.master_node if node.role == "master" else self.params.worker_node

    def target(self, node: ClusterNode) -> SshTarget:
        p = self.group(node)
        return SshTarget(
            host=node.ssh_ip,
            username=p.username,
            port=p.ssh_port,
            password=p.password,
            client_keys=(p.ssh_private_key_path,) if p.ssh_private_key_path else (),
            known_hosts=p.known_hosts,
        )

    async def run(
        self,
        node: ClusterNode,
        command: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the remote command's limit
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        secrets: Sequence[str] = (),
    ) -> CommandResult:
        """Run ``command`` as root (sudo) on ``node``; the result whatever its exit status."""
        return await self.ssh.run(
            self.target(node),
            command,
            sudo=True,
            command_timeout=timeout or self.settings.kubectl_timeout,
            env=env,
            input=input,
            secrets=secrets,
        )

    def kubectl(self, args: str) -> str:
        """A kubectl command line using the admin kubeconfig (works as root on any master)."""
        return f"{shlex.quote(self.settings.kubectl)} --kubeconfig {ADMIN_CONF} {args}"

    def kubeadm(self, args: str) -> str:
        return f"{shlex.quote(self.settings.kubeadm)} {args}"

    def script_env(self, node: ClusterNode) -> dict[str, str]:
        env = dict(self.settings.script_env)
        env["K8S_NODE_NAME"] = node.name
        env["ha_flag"] = "True" if self.topo.ha else "False"
        return env

    def vim_name(self) -> str:
        return self.params.vim_name_for(self.ctx.vnf_instance_id)
