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
path and says what is wrong, never echoing a value (passwords live here). A value
that reaches a file, a command line or a URL is checked for what it is (a name, a
login, an absolute path, an NFS client and its options, host[:port], a CIDR), so
no line break, quote or syntax of the file it goes into can get through.
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
    "EXPORT_FLAGS",
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
        if "%" in value:  # an IPv6 scope may hold any character
            raise ValueError
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError("not a CIDR (like 10.0.0.0/8)") from None
    if "/" not in value:
        raise ValueError("not a CIDR: the prefix length (/N) is missing")
    return value


# Values that reach a file or a command on a node (or a URL) are checked for what they
# are, not just for being strings: no value may carry a line break, a quote or a
# character of the syntax it is written into.
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]*")
_IDENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")
_LOGIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*\.?")
# A path on a node: absolute, made of these characters only (none is syntax in
# /etc/exports, a shell word quoted by shlex, or fstab), no "." or ".." part.
_PATH_PART = re.compile(r"[A-Za-z0-9_.@+=:~,%\[\]-]+")


def _identifier(value: str) -> str:
    if not _IDENT.fullmatch(value) or value in (".", ".."):
        raise ValueError(
            "not a name (letters, digits and _ . - only, at most 255; like masterNode_CP1)"
        )
    return value


def _login(value: str) -> str:
    if not _LOGIN.fullmatch(value):
        raise ValueError("not a login name (letters, digits and _ . - only, at most 32)")
    return value


def _printable(value: str) -> str:
    if not _PRINTABLE.fullmatch(value):
        raise ValueError("must not contain control characters (line breaks, tabs ...)")
    return value


def _node_path(value: str) -> str:
    parts = value.split("/")
    if (
        not value.startswith("/")
        or value == "/"
        or not all(_PATH_PART.fullmatch(p) and p not in (".", "..") for p in parts[1:])
    ):
        raise ValueError(
            "not an absolute path of a directory other than / (letters, digits and "
            "_ . @ + = : ~ , % [ ] - in each part; no spaces, quotes, '#', '.' or '..' parts)"
        )
    return value


Identifier = Annotated[str, StringConstraints(strip_whitespace=True), AfterValidator(_identifier)]
Login = Annotated[str, StringConstraints(strip_whitespace=True), AfterValidator(_login)]
NodePath = Annotated[str, StringConstraints(strip_whitespace=True), AfterValidator(_node_path)]
Text = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=255),
    AfterValidator(_printable),
]
Cidr = Annotated[str, StringConstraints(strip_whitespace=True), AfterValidator(_cidr)]


class _Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeParams(_Params):
    """What both node groups share: how to find the VMs and log in to them."""

    ssh_cp_name: Identifier
    nic_cp_name: Identifier | None = None
    username: Login
    password: SecretStr | None = None
    aspect_id: Identifier | None = None
    vdu_id: Identifier | None = None
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
    cluster_cp_name: Identifier
    cluster_fip_name: Identifier | None = None
    pod_cidr: Cidr | None = None
    cluster_cidr: Cidr | None = None


class WorkerNodeParams(NodeParams):
    pass


def _proxy_url(value: str) -> str:
    # Written into apt.conf and a systemd unit, both quoted: no quote, space or
    # control character may break out (the value is never echoed: it may hold a password).
    if not re.fullmatch(r"(http|https|socks5h?)://[^\s\"'\\\x00-\x1f\x7f]+", value):
        raise ValueError("not a proxy URL (http://[user:password@]host:port, no spaces or quotes)")
    return value


def _no_proxy(value: str) -> str:
    # Hosts, .domains, addresses and CIDRs: what no_proxy readers understand.
    if not re.fullmatch(r"\s*[A-Za-z0-9.:/*_\[\]-]*(\s*,\s*[A-Za-z0-9.:/*_\[\]-]*)*\s*", value):
        raise ValueError(
            "a comma-separated list of hosts, .domains, addresses and CIDRs "
            "(letters, digits and . : / * _ [ ] - only)"
        )
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
    # A directory name under /etc/containerd/certs.d and a URL's authority: a hostname
    # or an IP address (IPv6 in brackets), and a port; never "..", a slash or a path.
    match = re.fullmatch(
        r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:/\[\]]+))(?::(?P<port>[0-9]{1,5}))?", value
    )
    host = match and match.group("host")
    ok = match is not None and (
        (host is not None and _HOSTNAME.fullmatch(host) is not None and not host.endswith("."))
        or (match.group("v6") is not None and _is_ip(match.group("v6"), version=6))
    )
    port = match.group("port") if match else None
    if not ok or (port is not None and not 1 <= int(port) <= 65535):
        raise ValueError(
            "not a registry server (a hostname or IP address, and :port from 1 to 65535; "
            "no scheme, path or '..')"
        )
    return value


def _is_ip(text: str, *, version: int | None = None) -> bool:
    if "%" in text:  # an IPv6 scope may hold any character, even a line break
        return False
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    return version is None or address.version == version


def _hosts_string(value: str) -> str:
    parts = value.split()
    if "\n" in value.strip() or len(parts) < 2 or not re.fullmatch(r"[^\x00-\x1f#]*", value):
        raise ValueError("one /etc/hosts line: an address and its names")
    if not _is_ip(parts[0]):
        raise ValueError("one /etc/hosts line: it must start with an IP address")
    if not all(_HOSTNAME.fullmatch(name) for name in parts[1:]):
        raise ValueError("one /etc/hosts line: its names must be hostnames")
    return value.strip()


class PrivateRegistryParams(_Params):
    connection_type: Literal["0", "1"]  # "0" = HTTP, "1" = HTTPS
    server: Annotated[
        str, StringConstraints(strip_whitespace=True), AfterValidator(_registry_server)
    ]
    username: Text | None = None
    password: SecretStr | None = None
    certificate_path: Text | None = None
    hosts_string: Annotated[str, AfterValidator(_hosts_string)] | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> PrivateRegistryParams:
        if (self.username is None) != (self.password is None):
            raise ValueError("give both username and password, or neither")
        if self.username is not None and ":" in self.username:
            raise ValueError("username must not contain ':' (basic auth)")
        return self


class CinderVolumeSetup(_Params):
    volume_resource_id: Identifier
    mount_to: NodePath


# exports(5) options a VNF may ask for (``no_root_squash`` only where the operator
# allows it: cluster.nfs_allow_no_root_squash); anonuid/anongid/sec take a value.
EXPORT_FLAGS = frozenset(
    {
        "rw",
        "ro",
        "sync",
        "async",
        "secure",
        "insecure",
        "wdelay",
        "no_wdelay",
        "subtree_check",
        "no_subtree_check",
        "root_squash",
        "no_root_squash",
        "all_squash",
        "no_all_squash",
        "hide",
        "nohide",
        "crossmnt",
    }
)
_EXPORT_VALUE = re.compile(
    r"(anonuid|anongid)=[0-9]{1,10}|sec=(sys|krb5|krb5i|krb5p)(:(sys|krb5|krb5i|krb5p))*"
)
_EXPORT_TO = re.compile(r"(?P<client>[^()\s]+)(?:\((?P<options>[^()\s]*)\))?")
_WILDCARD_HOST = re.compile(
    r"[A-Za-z0-9*?](?:[A-Za-z0-9*?-]*[A-Za-z0-9*?])?(?:\.[A-Za-z0-9*?](?:[A-Za-z0-9*?-]*[A-Za-z0-9*?])?)*"
)


def _export_client(client: str) -> bool:
    if client == "*" or _is_ip(client):
        return True
    if "/" in client:
        try:
            _cidr(client)
        except ValueError:
            return False
        return True
    if client.startswith("@"):  # a netgroup
        return _IDENT.fullmatch(client[1:]) is not None
    return len(client) <= 253 and _WILDCARD_HOST.fullmatch(client) is not None


def _export_to(value: str) -> str:
    match = _EXPORT_TO.fullmatch(value)
    if match is None or not _export_client(match.group("client")):
        raise ValueError(
            "not an NFS client: a host, an IP address, a CIDR or *, optionally with "
            "(options), like 10.10.0.0/24 or 10.10.0.0/24(rw,sync)"
        )
    options = match.group("options")
    if options is not None:
        bad = [
            o
            for o in options.split(",")
            if o not in EXPORT_FLAGS and not _EXPORT_VALUE.fullmatch(o)
        ]
        if bad or not options:
            raise ValueError(
                "options must be a comma-separated list of "
                f"{', '.join(sorted(EXPORT_FLAGS))}, anonuid=N, anongid=N, sec=..."
            )
    return value


class NfsServerSetup(_Params):
    export_dir: NodePath
    export_to: Annotated[str, StringConstraints(strip_whitespace=True), AfterValidator(_export_to)]

    @property
    def client(self) -> str:
        """The NFS client of ``export_to`` (a host, address, CIDR or ``*``)."""
        return self.export_to.split("(", 1)[0]

    @property
    def options(self) -> tuple[str, ...] | None:
        """The options ``export_to`` gives, or ``None`` (then Tacker's default applies)."""
        if "(" not in self.export_to:
            return None
        return tuple(self.export_to.split("(", 1)[1].rstrip(")").split(","))


class StorageServerParams(_Params):
    ssh_cp_name: Identifier
    username: Login
    password: SecretStr
    nic_cp_name: Identifier | None = None
    cinder_volume_setup_params: list[CinderVolumeSetup] = []
    nfs_server_setup_params: list[NfsServerSetup] = []


class PvRegistrationParams(_Params):
    pv_manifest_file_path: Text
    nfs_server_cp: Identifier


class K8sClusterInstallationParams(_Params):
    """``additionalParams.k8s_cluster_installation_param`` of one request."""

    script_path: Text
    vim_name: Text | None = None
    master_node: MasterNodeParams
    worker_node: WorkerNodeParams
    proxy: ProxyParams | None = None
    helm_installation_script_path: Text | None = None
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
