"""``additionalParams.k8s_cluster_installation_param``: what the cluster handlers need.

The parameter tables of Tacker's guides (seeds 000 = v1 API, 002 = v2 API;
reference/TACKER.md §1.2), plus our own optional SSH fields:

* v1: ``master_node`` / ``worker_node`` name their VMs by ``aspect_id`` (an
  AutoScalingGroup) or not at all; ``pod_cidr`` defaults to 192.168.0.0/16;
  ``nic_cp_name`` is optional for the master; extras: ``proxy``,
  ``helm_installation_script_path``, ``private_registry_connection_info``,
  ``storage_server``, ``pv_registration_params``.
* v2: both node groups require ``vdu_id`` and ``nic_cp_name``; ``pod_cidr``
  defaults to 10.0.0.0/8. Tacker's v2 driver has none of the extras; we apply
  ``proxy``, ``helm_installation_script_path``, ``storage_server``,
  ``pv_registration_params`` and ``private_registry_connection_info`` with
  either API.
* ours, per node group: ``ssh_private_key_path`` (a key file on the
  subscriber's host; then ``password`` may be left out), ``known_hosts``
  (OpenSSH known_hosts lines pinning the VMs' host keys), ``ssh_port``.

:func:`parse_cluster_params` validates with the API version as context and
raises :class:`ClusterParamsError`, whose message names each bad field by its
path and says what is wrong, never echoing a value (passwords live here).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from subscriber.errors import ClusterParamsError

__all__ = [
    "PARAM_KEY",
    "ApiVersion",
    "K8sClusterInstallationParams",
    "MasterNodeParams",
    "NodeParams",
    "PrivateRegistryParams",
    "ProxyParams",
    "PvRegistrationParams",
    "StorageServerParams",
    "WorkerNodeParams",
    "apply_credential_overrides",
    "parse_cluster_params",
]

PARAM_KEY = "k8s_cluster_installation_param"
ApiVersion = Literal["v1", "v2"]
DEFAULT_POD_CIDR: dict[str, str] = {"v1": "192.168.0.0/16", "v2": "10.0.0.0/8"}
DEFAULT_SERVICE_CIDR = "10.96.0.0/12"


def _cidr(value: str) -> str:
    # kubeadm accepts host bits (the v1 guide's own example is 192.168.3.0/16).
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError("not a CIDR (like 10.0.0.0/8)") from None
    if "/" not in value:
        raise ValueError("not a CIDR: the prefix length (/N) is missing")
    return value


Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Cidr = Annotated[str, StringConstraints(strip_whitespace=True), AfterValidator(_cidr)]


class _Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeParams(_Params):
    """What both node groups share: how to find the VMs and log in to them."""

    ssh_cp_name: Name
    nic_cp_name: Name | None = None
    username: Name
    password: SecretStr | None = None
    aspect_id: Name | None = None
    vdu_id: Name | None = None
    # ours
    ssh_private_key_path: Path | None = None
    known_hosts: str | None = Field(default=None, repr=False)
    ssh_port: int = Field(default=22, gt=0, le=65535)

    @model_validator(mode="after")
    def _credentials_and_api(self, info: ValidationInfo) -> NodeParams:
        if self.password is None and self.ssh_private_key_path is None:
            raise ValueError("give password or ssh_private_key_path: no way to log in")
        empty = self.password is not None and not self.password.get_secret_value()
        if empty and self.ssh_private_key_path is None:
            raise ValueError("password is empty and no ssh_private_key_path is given")
        if self.ssh_private_key_path is not None and not self.ssh_private_key_path.is_absolute():
            raise ValueError("ssh_private_key_path must be an absolute path")
        if _api(info) == "v2":
            missing = [name for name in ("vdu_id", "nic_cp_name") if getattr(self, name) is None]
            if missing:
                raise ValueError(f"{' and '.join(missing)} required with the v2 API")
        elif self.vdu_id is not None and self.aspect_id is not None:
            raise ValueError("give aspect_id (v1) or vdu_id (v2), not both")
        return self

    @property
    def nic_cp(self) -> str:
        """The port whose IP Kubernetes uses (``nic_cp_name``, else ``ssh_cp_name``)."""
        return self.nic_cp_name or self.ssh_cp_name


class MasterNodeParams(NodeParams):
    cluster_cp_name: Name
    cluster_fip_name: Name | None = None
    pod_cidr: Cidr | None = None
    cluster_cidr: Cidr | None = None


class WorkerNodeParams(NodeParams):
    pass


def _proxy_url(value: str) -> str:
    # Written into apt.conf and a systemd unit, both quoted: no quote, space or
    # control character may break out (the value is never echoed: it may hold a password).
    if not re.fullmatch(r"(http|https|socks5h?)://[^\s\"'\\]+", value):
        raise ValueError("not a proxy URL (http://[user:password@]host:port, no spaces or quotes)")
    return value


def _no_proxy(value: str) -> str:
    if not re.fullmatch(r"[^\"'\\\x00-\x1f]*", value):
        raise ValueError("a comma-separated list of hosts, addresses and CIDRs (no quotes)")
    return value


ProxyUrl = Annotated[str, StringConstraints(strip_whitespace=True), AfterValidator(_proxy_url)]


class ProxyParams(_Params):
    http_proxy: ProxyUrl | None = Field(default=None, repr=False)  # may carry user:password@
    https_proxy: ProxyUrl | None = Field(default=None, repr=False)
    no_proxy: Annotated[str, AfterValidator(_no_proxy)] | None = None
    k8s_node_cidr: Cidr | None = None

    @property
    def urls(self) -> tuple[str, ...]:
        """The proxy URLs given (they may carry a password: secrets)."""
        return tuple(u for u in (self.http_proxy, self.https_proxy) if u)


def _registry_server(value: str) -> str:
    # A directory name under /etc/containerd/certs.d and a URL's authority.
    if not re.fullmatch(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?", value):
        raise ValueError("not a registry server (host or host:port, no scheme or path)")
    return value


def _hosts_string(value: str) -> str:
    parts = value.split()
    if "\n" in value.strip() or len(parts) < 2 or not re.fullmatch(r"[^\x00-\x1f#]*", value):
        raise ValueError("one /etc/hosts line: an address and its names")
    try:
        ipaddress.ip_address(parts[0])
    except ValueError:
        raise ValueError("one /etc/hosts line: it must start with an IP address") from None
    return value.strip()


class PrivateRegistryParams(_Params):
    connection_type: Literal["0", "1"]  # "0" = HTTP, "1" = HTTPS
    server: Annotated[
        str, StringConstraints(strip_whitespace=True), AfterValidator(_registry_server)
    ]
    username: Name | None = None
    password: SecretStr | None = None
    certificate_path: Name | None = None
    hosts_string: Annotated[str, AfterValidator(_hosts_string)] | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> PrivateRegistryParams:
        if (self.username is None) != (self.password is None):
            raise ValueError("give both username and password, or neither")
        if self.username is not None and ":" in self.username:
            raise ValueError("username must not contain ':' (basic auth)")
        return self


class CinderVolumeSetup(_Params):
    volume_resource_id: Name
    mount_to: Name


class NfsServerSetup(_Params):
    export_dir: Name
    export_to: Name


class StorageServerParams(_Params):
    ssh_cp_name: Name
    username: Name
    password: SecretStr
    nic_cp_name: Name | None = None
    cinder_volume_setup_params: list[CinderVolumeSetup] = []
    nfs_server_setup_params: list[NfsServerSetup] = []


class PvRegistrationParams(_Params):
    pv_manifest_file_path: Name
    nfs_server_cp: Name


class K8sClusterInstallationParams(_Params):
    """``additionalParams.k8s_cluster_installation_param`` of one request."""

    script_path: Name
    vim_name: Name | None = None
    master_node: MasterNodeParams
    worker_node: WorkerNodeParams
    proxy: ProxyParams | None = None
    helm_installation_script_path: Name | None = None
    private_registry_connection_info: list[PrivateRegistryParams] = []
    storage_server: StorageServerParams | None = None
    pv_registration_params: list[PvRegistrationParams] = []
    # ours: label workers topology.kubernetes.io/zone=<the server's availability zone>
    label_zone: bool = False

    _api: ApiVersion = PrivateAttr(default="v2")

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> K8sClusterInstallationParams:
        self._api = _api(info)
        # Only values the user gave: Tacker's own v2 defaults overlap each other.
        given_pods, given_services = self.master_node.pod_cidr, self.master_node.cluster_cidr
        if (
            given_pods
            and given_services
            and ipaddress.ip_network(given_pods, strict=False).overlaps(
                ipaddress.ip_network(given_services, strict=False)
            )
        ):
            raise ValueError(
                f"master_node.pod_cidr ({self.pod_cidr}) overlaps "
                f"master_node.cluster_cidr ({self.service_cidr})"
            )
        if self.pv_registration_params and self.storage_server is None:
            raise ValueError("pv_registration_params need storage_server")
        return self

    @property
    def api_version(self) -> ApiVersion:
        return self._api

    @property
    def pod_cidr(self) -> str:
        """``master_node.pod_cidr`` or the API version's default."""
        return self.master_node.pod_cidr or DEFAULT_POD_CIDR[self._api]

    @property
    def service_cidr(self) -> str:
        """``master_node.cluster_cidr`` (the service CIDR) or 10.96.0.0/12."""
        return self.master_node.cluster_cidr or DEFAULT_SERVICE_CIDR

    def vim_name_for(self, vnf_instance_id: str) -> str:
        """The VIM name Tacker's v1 driver would use (``kubernetes_vim_<id>``)."""
        return self.vim_name or f"kubernetes_vim_{vnf_instance_id}"


def _api(info: ValidationInfo) -> ApiVersion:
    context = info.context if isinstance(info.context, Mapping) else {}
    api = context.get("api", "v2")
    if api not in ("v1", "v2"):
        raise ValueError(f"unknown API version {api!r}")
    return "v1" if api == "v1" else "v2"


_MESSAGES = {
    "missing": "required",
    "extra_forbidden": "unknown field (check the spelling)",
    "string_too_short": "must not be empty",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be a list",
    "string_type": "must be a string",
}


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    out = []
    for error in exc.errors(include_input=False, include_url=False):
        path = ".".join([PARAM_KEY, *(str(part) for part in error["loc"])])
        message = _MESSAGES.get(error["type"], error["msg"])
        message = message.removeprefix("Value error, ")
        if error["type"] == "literal_error":
            message = f"must be one of {error['ctx']['expected']}"
        out.append((path, message))
    return out


def parse_cluster_params(
    additional_params: Mapping[str, Any] | None, *, api: ApiVersion = "v2"
) -> K8sClusterInstallationParams:
    """Validate ``additionalParams`` (the whole dict) of an LCM request.

    Arguments:
        additional_params: the request's ``additionalParams``.
        api: ``v1`` or ``v2`` (the VNF LCM API version of the operation).

    Returns:
        The parsed ``k8s_cluster_installation_param``.

    Raises:
        ClusterParamsError: missing or invalid; the message names each field.
    """
    if not additional_params or PARAM_KEY not in additional_params:
        raise ClusterParamsError([("", f"additionalParams has no {PARAM_KEY}")])
    data = additional_params[PARAM_KEY]
    if not isinstance(data, Mapping):
        raise ClusterParamsError([(PARAM_KEY, "must be an object")])
    try:
        return K8sClusterInstallationParams.model_validate(data, context={"api": api})
    except ValidationError as exc:
        raise ClusterParamsError(_problems(exc)) from None


def apply_credential_overrides(
    params: K8sClusterInstallationParams, additional_params: Mapping[str, Any]
) -> K8sClusterInstallationParams:
    """v1 scale/heal: ``master_node_username``/``_password`` and the worker's override.

    Raises:
        ClusterParamsError: an override is not a non-empty string.
    """
    updates: dict[str, Any] = {}
    for group in ("master_node", "worker_node"):
        node: NodeParams = getattr(params, group)
        change: dict[str, Any] = {}
        for field in ("username", "password"):
            value = additional_params.get(f"{group}_{field}")
            if value is None:
                continue
            if not isinstance(value, str) or not value:
                raise ClusterParamsError([(f"{group}_{field}", "must be a non-empty string")])
            change[field] = SecretStr(value) if field == "password" else value
        if change:
            updates[group] = node.model_copy(update=change)
    if not updates:
        return params
    copied = params.model_copy(update=updates)
    copied._api = params.api_version
    return copied
