"""Configuration: one pydantic-settings model with a frozen section per component.

Sources, highest priority first: command-line flags (applied by the CLI as
overrides), ``LCCN_*`` environment variables (nested with ``__``, e.g.
``LCCN_HTTP__PORT``), files in the directory ``LCCN_SECRETS_DIR`` names (one
setting a file, named like its variable: ``lccn_tacker__password``), a YAML or
TOML file given with ``--config`` (or ``LCCN_CONFIG``), then the defaults below.

Each component receives only its own section. Times are float seconds named
``*_timeout`` / ``*_interval``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from subscriber.errors import ConfigFileError

__all__ = [
    "AuthSettings",
    "BasicAuthSettings",
    "ClusterSettings",
    "DatabaseSettings",
    "DispatchSettings",
    "HandlerSettings",
    "HttpSettings",
    "KafkaSettings",
    "LogSettings",
    "MtlsSettings",
    "OAuth2Settings",
    "OpenStackSettings",
    "RelaySettings",
    "RetentionSettings",
    "Settings",
    "SshSettings",
    "TackerSettings",
    "TracingSettings",
    "default_data_dir",
    "default_database_path",
    "is_loopback",
    "load_settings",
    "masked",
    "parse_duration",
]


def default_data_dir() -> Path:
    """``$LCCN_HOME`` if set, else ``$XDG_DATA_HOME/lccn-subscriber`` (``~/.local/share/...``)."""
    home = os.environ.get("LCCN_HOME")
    if home:
        return Path(home)
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "lccn-subscriber"


def default_database_path() -> Path:
    """Where the embedded SQLite store lives unless configured otherwise.

    ``$LCCN_HOME/lccn.db`` if ``LCCN_HOME`` is set, else
    ``$XDG_DATA_HOME/lccn-subscriber/lccn.db`` (``~/.local/share/...``).
    """
    return default_data_dir() / "lccn.db"


class _Section(BaseModel):
    # Each field's docstring is its description (the settings reference is built from it).
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``); wildcards are not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class HttpSettings(_Section):
    """The callback listener Tacker POSTs notifications to, and where the probes live.

    ``/metrics`` and ``/readyz`` are open only on a private listener. With a
    loopback ``host`` (the default) that is the callback listener itself. With
    any other ``host``, or with ``metrics_host`` set, they are served openly
    on a listener of their own, ``metrics_host`` (default ``127.0.0.1``) on
    ``metrics_port`` (0: a free port); on the callback listener they then need
    the callback's credentials. ``/healthz`` (liveness) is open everywhere.
    """

    host: str = "127.0.0.1"
    """Address the callback listener binds to (``0.0.0.0``: every address of the host)."""
    port: int = Field(default=8765, ge=0, le=65535)
    """TCP port of the callback listener."""
    path: str = "/lccn/notifications"
    """URL path of the callback: Tacker POSTs notifications here and GETs it to test a
    subscription."""
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    """Largest notification body accepted, in bytes; a larger one is refused with 413."""
    metrics_host: str = ""
    """Where ``/metrics`` and ``/readyz`` are served when ``host`` is not loopback (default
    ``127.0.0.1``); on the callback listener they then need the callback's credentials."""
    metrics_port: int = Field(default=9765, ge=0, le=65535)
    """The port of that private listener (``0`` picks a free one, logged as
    ``metrics listening``)."""

    @field_validator("path")
    @classmethod
    def _path_absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value.rstrip("/") or "/"

    @model_validator(mode="after")
    def _listeners_differ(self) -> HttpSettings:
        listener = self.probes_listener()
        if listener is not None and listener == (self.host, self.port) and self.port != 0:
            raise ValueError(
                "http.metrics_host:metrics_port is the callback listener itself: "
                "give the metrics listener another port (or leave metrics_host empty)"
            )
        return self

    def probes_listener(self) -> tuple[str, int] | None:
        """``(host, port)`` of the listener that serves ``/metrics`` and ``/readyz`` openly,
        or ``None`` when the callback listener does (a loopback ``host``, no ``metrics_host``).
        """
        if self.metrics_host:
            return self.metrics_host, self.metrics_port
        if is_loopback(self.host):
            return None
        return "127.0.0.1", self.metrics_port


class DatabaseSettings(_Section):
    """The event store: an SQLAlchemy async URL (SQLite file or PostgreSQL)."""

    url: str = ""
    """SQLAlchemy async URL of the store: ``sqlite+aiosqlite:///PATH`` or
    ``postgresql+asyncpg://USER@HOST/DB``. Empty: the embedded SQLite file,
    ``$LCCN_HOME/lccn.db`` if ``LCCN_HOME`` is set, else
    ``${XDG_DATA_HOME:-~/.local/share}/lccn-subscriber/lccn.db``."""
    sqlite_synchronous: Literal["OFF", "NORMAL", "FULL"] = "FULL"
    """SQLite's ``synchronous`` pragma. ``FULL`` fsyncs the WAL on every (group) commit, so an
    acknowledged event survives a power cut, not just a process crash."""
    group_commit_max: int = Field(default=256, gt=0)
    """Most write operations (event appends, job checkpoints) the store's one writer runs in one
    transaction and commit (group commit)."""
    busy_timeout: float = Field(default=10.0, gt=0)
    """SQLite: seconds a connection waits for the database's write lock before it fails."""
    lock_timeout: float = Field(default=5.0, gt=0)
    """PostgreSQL: seconds a statement waits at most for a row lock. A replica paused
    mid-transaction (SIGSTOP, a frozen VM) would otherwise hold its locks, and stall every other
    replica's writes, until it wakes."""
    idle_in_transaction_timeout: float = Field(default=10.0, gt=0)
    """PostgreSQL: a session idle inside a transaction this long (seconds) is ended by the server
    (``idle_in_transaction_session_timeout``), for the same reason as ``lock_timeout``."""

    def resolved_url(self) -> str:
        """The configured URL, or the embedded SQLite default."""
        if self.url:
            return self.url
        return f"sqlite+aiosqlite:///{default_database_path()}"


class DispatchSettings(_Section):
    """Lanes, ordering, leases and retries."""

    enabled: bool = True
    """Run jobs in this process. ``false``: this process only ingests (stores and acknowledges);
    other replicas sharing the database run the jobs."""
    max_parallel_lanes: int = Field(default=16, gt=0)
    """VNF instances (lanes) whose jobs run at once."""
    reorder_window: float = Field(default=0.3, ge=0)
    """Seconds a later transition of an op-occ waits for earlier ones that may still arrive out of
    order."""
    lease_ttl: float = Field(default=30.0, gt=0)
    """Seconds a lane's lease lasts; it is renewed every ``lease_ttl``/3. A replica that cannot
    renew in time stops the lane."""
    rescan_interval: float = Field(default=2.0, gt=0)
    """Seconds between rescans of the store: the safety net for work the wake-up cannot see, such
    as events written by another process (a ``replay`` from the CLI, another replica) and
    expired leases."""
    graceful_timeout: float = Field(default=20.0, ge=0)
    """On SIGTERM, seconds the running steps get to finish before they are cancelled."""
    max_attempts: int = Field(default=8, gt=0)
    """Attempts of a job that fails with transient errors; past them the event is ``failed``."""
    backoff_initial: float = Field(default=1.0, gt=0)
    """Seconds before the first retry of a transiently failed job; doubled on each further attempt
    (with jitter)."""
    backoff_max: float = Field(default=300.0, gt=0)
    """Upper bound, in seconds, of the backoff between retries of a job."""
    worker_id: str = ""
    """This worker's name in the lane leases; empty: derived from the host name and process id."""
    worker_nice: int = Field(default=10, ge=0, le=19)
    """Niceness added to ``serve``'s own worker process: when the CPU is short, ingest
    (acknowledging Tacker and Kafka) goes first and jobs wait. ``0`` keeps both at one level."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(value: str | float) -> float:
    """Seconds from ``90``, ``45s``, ``15m``, ``12h``, ``30d`` or ``2w``.

    Raises:
        ValueError: not a non-negative number with an optional unit.
    """
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {value}")
        return float(value)
    m = _DURATION.match(value)
    if m is None:
        raise ValueError(f"not a duration (like 90s, 15m, 12h, 30d): {value!r}")
    return float(m[1]) * _UNIT[m[2]]


class RetentionSettings(_Section):
    """Pruning of settled events, with their jobs and steps, in the background of ``serve``.

    Events ``done``, ``ignored``, ``stale`` and ``echo`` whose last change is
    older than ``max_age`` go; ``failed`` and ``poison`` events stay until
    replayed or pruned by hand (``events prune --include-failed``); open events
    never go. Durations take ``30d``, ``12h``, ``15m``, ``90s`` or seconds.
    """

    enabled: bool = True
    """Prune settled events (with their jobs and steps) in the background of ``serve``."""
    max_age: float = Field(default=30 * 86400.0, gt=0)
    """Settled events whose last change is older than this go (seconds, or ``30d``, ``12h``,
    ``15m``, ``90s``). Keep it well beyond any redelivery delay: a notification redelivered
    after its event was pruned is no longer recognised as a duplicate."""
    interval: float = Field(default=3600.0, gt=0)
    """How often the pruner looks (seconds, or a duration such as ``1h``)."""
    batch: int = Field(default=500, gt=0)
    """Rows deleted per transaction: ingest and jobs get the writer in between."""

    @field_validator("max_age", "interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value) if isinstance(value, str) else value


class HandlerSettings(_Section):
    """Extra handler modules: each is imported and its ``register(registry)`` called.

    ``LCCN_HANDLERS__MODULES`` takes a JSON list or comma-separated names.
    """

    modules: Annotated[tuple[str, ...], NoDecode] = ()
    """Python modules imported at start; each module's ``register(registry)`` adds its routes (see
    the handlers guide). Environment: a JSON list or comma-separated names."""

    @field_validator("modules", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _string_list(value)


class SshSettings(_Section):
    """The SSH executor that runs the cluster work on the VNF's VMs.

    Host keys are pinned: ``strict`` accepts only keys listed in
    ``known_hosts``; ``accept-new`` records the key of a host seen for the
    first time there (trust on first use) and still rejects a changed key.
    A job logs in with what its parameters give (a password, or an
    ``ssh_private_key_path`` under ``key_dir``); ``client_keys`` are offered only
    to a target whose parameters give neither. A pooled connection is shared only
    by jobs presenting the same credentials and pinned host keys, and is closed
    after ``idle_timeout`` seconds unused.
    """

    known_hosts: Path | None = None
    """The known_hosts file host keys are checked against (and, with ``accept-new``, recorded in);
    unset: ``<data dir>/known_hosts``."""
    host_key_policy: Literal["strict", "accept-new"] = "strict"
    """``strict``: only keys listed in ``known_hosts``; ``accept-new``: trust on first use, still
    rejecting a changed key."""
    client_keys: Annotated[tuple[Path, ...], NoDecode] = ()
    """The operator's private key files, offered only to a host whose parameters give neither a
    key nor a password of their own. Environment: ``a,b`` or a JSON list."""
    key_dir: Path | None = None
    """The directory a VNF's ``ssh_private_key_path`` must lie in once every symlink is
    resolved; unset: no parameter may name a key file."""
    max_key_bytes: int = Field(default=64 * 1024, ge=1024)
    """The largest private key file read for an ``ssh_private_key_path``."""
    idle_timeout: float = Field(default=60.0, gt=0)
    """Seconds a pooled connection may stay unused before it is closed."""
    port: int = Field(default=22, gt=0, le=65535)
    """SSH port of the nodes, unless the parameters give one (``ssh_port``)."""
    connect_timeout: float = Field(default=15.0, gt=0)
    """Seconds to connect and authenticate to a node."""
    command_timeout: float = Field(default=600.0, gt=0)
    """Seconds a remote command may run unless its step passes its own; every command gets one
    (Tacker's executor has none)."""
    keepalive_interval: float = Field(default=15.0, ge=0)
    """Seconds between SSH keepalives on an idle connection (``0``: none)."""
    max_output_bytes: int = Field(default=64 * 1024, ge=1024)
    """Output kept per stream and command: the tail, where errors are."""
    remote_shell: str = "bash"
    """Commands run as ``timeout T <remote_shell> -c CMD`` (Tacker's ran in the login shell,
    bash)."""
    max_sessions_per_host: int = Field(default=8, gt=0)
    """Concurrent sessions per connection; OpenSSH's ``MaxSessions`` is 10 by default, so stay
    below it."""
    max_connections: int = Field(default=64, gt=0)
    """SSH connections open at once, over every node of every VNF. A job that needs another
    connection first closes the one unused longest; while none is unused, it waits (it does not
    fail) until a command ends. Many VNF instances changing at once thus hold this many, not
    three or more each."""

    @field_validator("client_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: Any) -> Any:
        return _string_list(value)

    def resolved_known_hosts(self) -> Path:
        """The configured known_hosts file, or ``<data dir>/known_hosts``."""
        return (
            self.known_hosts if self.known_hosts is not None else default_data_dir() / "known_hosts"
        )


class ClusterSettings(_Section):
    """How the cluster handlers drive the nodes.

    The install script is the VNF package's ``script_path`` file (ours as the
    fallback); ``script_env`` is exported for it on every node, an operator's override
    (``K8S_VERSION``, ``K8S_CNI``, ``K8S_SKIP_PHASES`` ... for ours): the version and
    the CNI are the package's script's business. ``kubectl`` and ``kubeadm`` name the
    tools on the masters (absolute paths where PATH differs).
    """

    handlers: Literal["auto", "on", "off"] = "auto"
    """``auto``: the cluster routes (INSTANTIATE, SCALE, HEAL, TERMINATE, the drain hook's job)
    when both ``tacker`` and ``openstack`` are configured, else every operation goes to the
    ``log`` handler; ``on``: always (start-up fails while either is missing); ``off``: never."""
    scripts_dir: Path | None = None
    """Directory holding our ``install_k8s_cluster.sh`` (the fallback when a VNF package has no
    ``script_path`` file) and ``create_admin_token.yaml``; unset: those shipped with
    lccn-subscriber (``handlers/toolkit/node/``)."""
    script_env: dict[str, str] = {}
    """Environment exported for the install script (the package's ``script_path`` file, or
    ours) and the Helm script on every node, for every instance: an operator's override
    (``K8S_VERSION``, ``K8S_CNI``, ``K8S_SKIP_PHASES`` ... for our script; the version and
    CNI belong to the package's script). Sent on stdin, never on a command line, and masked
    by ``config show`` where secret-looking."""
    kubectl: str = "kubectl"
    """The kubectl command on the masters (an absolute path where PATH differs)."""
    kubeadm: str = "kubeadm"
    """The kubeadm command on the nodes (an absolute path where PATH differs)."""
    etcdctl: str = "etcdctl"
    """The etcdctl command, where ``etcdctl_via`` runs it."""
    etcdctl_via: Literal["pod", "host"] = "pod"
    """``pod``: etcdctl inside the master's etcd static pod (``kubectl exec``, Tacker's way);
    ``host``: etcdctl on the master itself (where pods cannot be exec'ed into)."""
    haproxy_reload: str = "systemctl reload haproxy"
    """Run on a master after its haproxy backends changed (empty: leave haproxy alone)."""
    install_timeout: float = Field(default=2700.0, gt=0)
    """Seconds ``install_k8s_cluster.sh`` may run on one node (Tacker's ``K8S_INSTALL_TIMEOUT``)."""
    kubectl_timeout: float = Field(default=60.0, gt=0)
    """Seconds one kubectl command on a master may run."""
    drain_timeout: float = Field(default=300.0, gt=0)
    """kubectl drain's own ``--timeout`` for one leaving node (the drain hook's job)."""
    token_wait_timeout: float = Field(default=60.0, gt=0)
    """Seconds to wait for the service-account token controller to fill the admin token's Secret."""
    helm_timeout: float = Field(default=300.0, gt=0)
    """Seconds the user's ``helm_installation_script_path`` may run on one master (Tacker's
    ``HELM_INSTALL_TIMEOUT``)."""
    pv_available_timeout: float = Field(default=150.0, gt=0)
    """Seconds a registered PersistentVolume has to become ``Available`` (Tacker: 5 x 30 s)."""
    max_package_file_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    """The most read of one file of the VNF package (the Helm script, a registry CA, a PV
    manifest), whatever its zip entry claims."""
    nfs_allow_no_root_squash: bool = False
    """Whether a VNF's ``nfs_server_setup_params.export_to`` may ask for ``no_root_squash``
    (the clients' root then acts as root on the export)."""

    @field_validator("script_env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
        if bad:
            raise ValueError(f"not environment variable names: {', '.join(sorted(bad))}")
        return value


class OpenStackSettings(_Section):
    """Heat and Nova reads (openstacksdk, password auth) for node discovery.

    Off (no ``openstack`` service) while ``auth_url`` is unset.
    """

    auth_url: str | None = None
    """Keystone v3 URL; unset: no OpenStack lookups (and no cluster handlers with
    ``cluster.handlers: auto``)."""
    username: str = ""
    """Keystone user name."""
    password: SecretStr = SecretStr("")
    """Keystone password."""
    project_name: str = ""
    """Keystone project the VNFs' stacks and servers live in."""
    user_domain_name: str = "Default"
    """Keystone domain of the user."""
    project_domain_name: str = "Default"
    """Keystone domain of the project."""
    region_name: str | None = None
    """Region of the Heat and Nova endpoints; unset: the catalog's only one."""
    interface: Literal["public", "internal", "admin"] = "public"
    """Endpoint interface taken from the catalog."""
    max_workers: int = Field(default=4, gt=0, le=64)
    """openstacksdk calls block: they run in this many threads, never on the event loop."""
    request_timeout: float = Field(default=30.0, gt=0)
    """Seconds one OpenStack API request may take."""

    @property
    def enabled(self) -> bool:
        return bool(self.auth_url)

    @model_validator(mode="after")
    def _complete(self) -> OpenStackSettings:
        if self.auth_url and not (self.username and self.project_name):
            raise ValueError("openstack.auth_url needs openstack.username and project_name")
        return self


class BasicAuthSettings(_Section):
    """HTTP Basic on the callback (Tacker ``authType: BASIC``, ``paramsBasic``)."""

    enabled: bool = False
    """Require HTTP Basic on the callback."""
    username: str = ""
    """The user name Tacker sends (``paramsBasic.userName``)."""
    password: SecretStr = SecretStr("")
    """The password Tacker sends (``paramsBasic.password``)."""

    @model_validator(mode="after")
    def _complete(self) -> BasicAuthSettings:
        if self.enabled and not (self.username and self.password.get_secret_value()):
            raise ValueError("auth.basic: 'username' and 'password' are required when enabled")
        return self


class OAuth2Settings(_Section):
    """This service as the OAuth 2.0 token endpoint Tacker calls (``OAUTH2_CLIENT_CREDENTIALS``).

    Tacker POSTs ``grant_type=client_credentials`` with HTTP Basic
    ``client_id:client_password`` to ``token_path`` and sends the bearer token
    it gets on each callback. Tokens are signed with a key derived from the
    client password, so every replica sharing the configuration accepts them.
    """

    enabled: bool = False
    """Serve the token endpoint and require a bearer token it issued on the callback."""
    client_id: str = ""
    """The client id Tacker authenticates with at the token endpoint."""
    client_password: SecretStr = SecretStr("")
    """The client password; tokens are signed with a key derived from it."""
    token_path: str = "/token"
    """Path of the token endpoint on the listener (``POST grant_type=client_credentials``, HTTP
    Basic client auth)."""
    token_ttl: float = Field(default=300.0, gt=0)
    """Seconds an issued token is valid."""
    token_endpoint: str = ""
    """The token URL Tacker is told to call (in the subscription); empty: this listener and
    ``token_path``."""

    @model_validator(mode="after")
    def _complete(self) -> OAuth2Settings:
        if self.enabled and not (self.client_id and self.client_password.get_secret_value()):
            raise ValueError(
                "auth.oauth2: 'client_id' and 'client_password' are required when enabled"
            )
        if not self.token_path.startswith("/"):
            raise ValueError("auth.oauth2: 'token_path' must start with '/'")
        return self


class MtlsSettings(_Section):
    """TLS on the listener with client certificates required (CERT_REQUIRED).

    With ``client_id`` set, the token endpoint also serves Tacker's
    ``OAUTH2_CLIENT_CERT`` flow: a token for ``client_id`` over a connection
    whose client certificate (signed by ``ca_file``) has the SHA-256
    thumbprint ``client_cert_sha256`` (``x5t#S256``, base64url; empty: any).
    """

    enabled: bool = False
    """TLS on the listener, client certificates required."""
    ca_file: Path | None = None
    """CA certificate (PEM) the client certificates must be signed by; required when enabled."""
    cert_file: Path | None = None
    """The listener's certificate (PEM); required when enabled."""
    key_file: Path | None = None
    """The listener's private key (PEM); required when enabled."""
    client_id: str = ""
    """Optional: the client id of Tacker's ``OAUTH2_CLIENT_CERT`` token flow over mTLS."""
    client_cert_sha256: str = ""
    """Optional: the ``x5t#S256`` pin (SHA-256 thumbprint, base64url) of Tacker's client
    certificate for that flow; empty: any certificate signed by ``ca_file``."""

    @model_validator(mode="after")
    def _complete(self) -> MtlsSettings:
        if self.enabled:
            for name in ("ca_file", "cert_file", "key_file"):
                path = getattr(self, name)
                if path is None:
                    raise ValueError(f"auth.mtls: {name!r} is required when enabled")
                if not Path(path).is_file():
                    raise ValueError(f"auth.mtls: {name} {path} is not a file")
        return self


class RelaySettings(_Section):
    """``serve --role relay``: Tacker's callback endpoint that produces each notification to
    the Kafka topic (``kafka.topics[0]``) and answers 204 once the broker acknowledged it."""

    id: str = ""
    """This relay's name in the records' ``lccn-relay`` header (default: host name and pid)."""
    produce_timeout: float = Field(default=10.0, gt=0)
    """Seconds a notification may wait for the broker's acknowledgement before the callback
    answers 503 (Tacker's own callback timeout is longer)."""
    idempotence: Literal["auto", "on", "off"] = "auto"
    """The idempotent producer (no duplicate from a retried send): ``auto`` uses it when the
    broker grants a producer id and else produces without (each partition's order is kept; a
    retried send's duplicate is collapsed by the workers' dedup); ``on`` insists (503 while
    the broker refuses); ``off`` never asks."""


class HookSettings(_Section):
    """Tacker's management-driver hooks (``POST {path}``): the VNF package's ``lccn_hook.py``,
    run by Tacker inside an operation, asks us to run the operation's cluster job and waits
    for it, so that the op-occ is COMPLETED only when the cluster is, and FAILED_TEMP with
    our reason when it is not (see the hooks guide).

    Off until a bearer token is set (``token``, or ``token_file`` read at start-up);
    the script presents the same token.
    """

    path: str = "/lccn/hooks"
    """Path of the hooks' routes (``POST {path}``, ``GET {path}/{vnfLcmOpOccId}/{point}``)."""
    token: SecretStr = SecretStr("")
    """The bearer token the hook script must present; without it (or ``token_file``) the hooks'
    routes do not exist. The access data handed back to a hook is sealed with a key derived
    from it."""
    token_file: Path | None = None
    """A file holding the token, read at start-up (instead of ``token``)."""
    answer_ttl: float = Field(default=7 * 86400.0, gt=0)
    """Seconds the access data a job handed back to its hook (sealed) may still be handed out:
    long enough for an operator's retry of the operation in Tacker."""

    @field_validator("path")
    @classmethod
    def _path_absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value.rstrip("/") or "/"

    @model_validator(mode="after")
    def _token_file_readable(self) -> HookSettings:
        if self.token_file is not None and not self.token_file.is_file():
            raise ValueError(f"token_file {self.token_file} is not a readable file")
        return self

    def bearer(self) -> str:
        """The token the hook must present; empty when the hook is off."""
        if self.token.get_secret_value():
            return self.token.get_secret_value()
        if self.token_file is not None:
            return self.token_file.read_text(encoding="utf-8").strip()
        return ""


class AuthSettings(_Section):
    """How Tacker must authenticate to the callback.

    Credentials come from here (``basic``, ``oauth2``, ``mtls``) or, when none
    of those is configured, are generated when we create our own subscription
    (``tacker.subscribe_on_start`` or ``lccn-subscriber subscribe``): ``generate``
    says which kind (``basic``: Tacker ``BASIC``; ``oauth2``:
    ``OAUTH2_CLIENT_CREDENTIALS`` with this service as the token endpoint;
    ``off``: the subscription carries none). The store keeps only what checks a
    generated secret, never the secret. With nothing configured and nothing
    generated the callback takes anyone's notifications (``serve`` warns).
    """

    basic: BasicAuthSettings = BasicAuthSettings()
    """HTTP Basic."""
    oauth2: OAuth2Settings = OAuth2Settings()
    """OAuth 2.0 client credentials."""
    mtls: MtlsSettings = MtlsSettings()
    """Mutual TLS."""
    realm: str = "lccn-subscriber"
    """The realm named in ``WWW-Authenticate`` of a refused callback."""
    generate: Literal["basic", "oauth2", "off"] = "basic"
    """What ``serve``/``subscribe`` generates for the LCCN subscription they create when the
    settings name no credentials: ``basic`` (Tacker BASIC), ``oauth2``
    (``OAUTH2_CLIENT_CREDENTIALS``, ``serve`` is the token endpoint) or ``off``."""

    @property
    def configured(self) -> bool:
        """Whether the settings themselves name credentials (or client certificates)."""
        return self.basic.enabled or self.oauth2.enabled or self.mtls.enabled


def _string_list(value: Any) -> Any:
    """Accept ``a,b`` or a JSON array from the environment, a list from a file."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return tuple(json.loads(text))
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return value


class KafkaSettings(_Section):
    """Kafka ingest: the consumer group that reads notification records.

    Ingest is off while ``bootstrap_servers`` is empty. Environment variables
    are ``LCCN_KAFKA__<FIELD>``; lists take ``a,b`` or a JSON array.
    """

    bootstrap_servers: Annotated[tuple[str, ...], NoDecode] = ()
    """Brokers (``host:port``); empty: no Kafka ingest. Environment: ``a:9092,b:9092`` or a JSON
    list."""
    topics: Annotated[tuple[str, ...], NoDecode] = ("lccn-notifications",)
    """Topics consumed; ``kafka publish`` writes to the first."""
    topic_pattern: str = ""
    """A regular expression; when set it replaces ``topics`` for consuming."""
    group_id: str = Field(default="lccn-subscriber", min_length=1)
    """The consumer group every replica joins."""
    client_id: str = "lccn-subscriber"
    """The Kafka client id."""
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    """Where a group without committed offsets starts."""

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """How to reach the brokers."""
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    """SASL mechanism; required with ``SASL_*`` protocols."""
    sasl_username: str = ""
    """SASL user name."""
    sasl_password: SecretStr = SecretStr("")
    """SASL password; never logged."""
    ssl_cafile: str = ""
    """CA file for the brokers' certificates."""
    ssl_certfile: str = ""
    """Client certificate (mutual TLS), with ``ssl_keyfile``."""
    ssl_keyfile: str = ""
    """Client private key; needs ``ssl_certfile``."""
    ssl_key_password: SecretStr = SecretStr("")
    """Password of ``ssl_keyfile``."""
    ssl_check_hostname: bool = True
    """Check the brokers' certificates name them."""

    session_timeout: float = Field(default=10.0, gt=0)
    """Group membership: seconds without heartbeat before the broker removes this consumer."""
    heartbeat_interval: float = Field(default=3.0, gt=0)
    """Seconds between heartbeats; must be below ``session_timeout``."""
    max_poll_timeout: float = Field(default=300.0, gt=0)
    """aiokafka's ``max_poll_interval``, in seconds. A slow store never counts against it: the poll
    loop keeps polling (with partitions paused) while appends wait."""
    request_timeout: float = Field(default=40.0, gt=0)
    """Seconds one request to a broker may take."""
    retry_backoff: float = Field(default=0.1, gt=0)
    """Seconds between retries of a failed broker request."""
    max_poll_records: int = Field(default=500, gt=0)
    """Most records one poll returns."""

    commit_interval: float = Field(default=1.0, gt=0)
    """Offsets are committed in batches, at most this often (seconds), and only past stored
    records."""
    max_in_flight: int = Field(default=4000, gt=0)
    """Records fetched but not yet stored; above it the partitions are paused."""
    pause_after: float = Field(default=1.0, gt=0)
    """Seconds the store may stay ``max_in_flight`` records behind before the partitions are
    paused (at most a quarter of ``max_poll_timeout``): pausing drops what aiokafka prefetched,
    fetched again on resume, so a store a moment behind is waited for instead."""
    store_backoff_initial: float = Field(default=0.2, gt=0)
    """While the store fails, appends are retried with this backoff (seconds), doubling."""
    store_backoff_max: float = Field(default=10.0, gt=0)
    """Upper bound of that backoff."""
    health_interval: float = Field(default=2.0, gt=0)
    """How often the broker is probed, for readiness."""
    revoke_drain_timeout: float = Field(default=5.0, ge=0)
    """On revocation, how long to wait for in-flight appends before committing."""
    graceful_timeout: float = Field(default=10.0, ge=0)
    """On stop, how long in-flight appends may finish before they are dropped (not committed, so
    redelivered later)."""

    @field_validator("bootstrap_servers", "topics", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _string_list(value)

    @field_validator("topic_pattern")
    @classmethod
    def _pattern_compiles(cls, value: str) -> str:
        if value:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSettings:
        if not self.enabled:
            return self
        if not self.topics and not self.topic_pattern:
            raise ValueError("kafka: set 'topics' or 'topic_pattern'")
        if self.security_protocol.startswith("SASL_"):
            if self.sasl_mechanism is None:
                raise ValueError(f"kafka: {self.security_protocol} needs 'sasl_mechanism'")
            if not self.sasl_username or not self.sasl_password.get_secret_value():
                raise ValueError("kafka: SASL needs 'sasl_username' and 'sasl_password'")
        elif self.sasl_mechanism is not None:
            raise ValueError("kafka: 'sasl_mechanism' needs security_protocol SASL_*")
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ValueError("kafka: 'ssl_keyfile' needs 'ssl_certfile'")
        if self.heartbeat_interval >= self.session_timeout:
            raise ValueError("kafka: 'heartbeat_interval' must be below 'session_timeout'")
        return self

    @property
    def enabled(self) -> bool:
        """Whether Kafka ingest is configured at all."""
        return bool(self.bootstrap_servers)

    @property
    def publish_topic(self) -> str:
        """The default topic ``kafka publish`` writes to (the first of ``topics``)."""
        return self.topics[0] if self.topics else "lccn-notifications"


class TackerSettings(_Section):
    """How we talk back to Tacker: auth, endpoint, retries, write-back, subscription, reconciler.

    ``auth_type``:

    * ``noauth``: Tacker runs with ``auth_strategy = noauth``; ``endpoint`` is
      required. Tacker then builds its request context from ``X-User-Id``,
      ``X-Project-Id`` (32 hex digits) and ``X-Roles``, which some calls
      (package and VIM APIs) need, so they are sent when set.
    * ``password`` / ``v3applicationcredential``: a Keystone v3 session
      (keystoneauth1, run in a small thread pool). The Tacker endpoint comes
      from the catalog (``service_type``, ``interface``, ``region_name``) unless
      ``endpoint`` fixes it.

    Environment variables are ``LCCN_TACKER__<FIELD>``.
    """

    auth_type: Literal["noauth", "password", "v3applicationcredential"] = "noauth"
    """``noauth`` (needs ``endpoint``), ``password`` or ``v3applicationcredential`` (a Keystone v3
    session)."""
    endpoint: str = ""
    """A fixed Tacker URL, e.g. ``http://tacker:9890`` (no catalog lookup)."""
    auth_url: str = ""
    """Keystone v3 URL (``password``, ``v3applicationcredential``)."""
    username: str = ""
    """Keystone user name (or ``user_id``)."""
    user_id: str = ""
    """Keystone user id (instead of ``username``)."""
    password: SecretStr = SecretStr("")
    """Keystone password."""
    user_domain_name: str = "Default"
    """Keystone domain of the user."""
    project_name: str = ""
    """Keystone project (or ``project_id``)."""
    project_id: str = ""
    """Keystone project id (instead of ``project_name``)."""
    project_domain_name: str = "Default"
    """Keystone domain of the project."""
    application_credential_id: str = ""
    """Application credential id (``v3applicationcredential``)."""
    application_credential_name: str = ""
    """Application credential name, with ``username`` (instead of the id)."""
    application_credential_secret: SecretStr = SecretStr("")
    """Application credential secret."""
    service_type: str = "nfv-orchestration"
    """Catalog service type of Tacker's endpoint."""
    interface: Literal["public", "internal", "admin"] = "public"
    """Catalog endpoint interface."""
    region_name: str = ""
    """Catalog region; empty: any."""
    verify_tls: bool = True
    """Verify Tacker's and Keystone's TLS certificates."""
    ca_file: str = ""
    """CA file for Tacker's and Keystone's certificates."""
    auth_threads: int = Field(default=2, gt=0, le=16)
    """Threads the blocking Keystone session runs in."""
    noauth_user_id: str = ""
    """``noauth``: sent as ``X-User-Id``; Tacker builds its request context from it, which some
    calls (package and VIM APIs) need."""
    noauth_project_id: str = ""
    """``noauth``: sent as ``X-Project-Id`` (32 hex digits)."""
    noauth_roles: str = "admin"
    """``noauth``: sent as ``X-Roles`` with a user or project id."""
    noauth_token: SecretStr = SecretStr("")
    """``noauth``: sent as ``X-Auth-Token`` when set."""

    api_version: Literal["v1", "v2"] = "v2"
    """The VNF LCM API used where a notification does not say which: subscriptions and the
    reconciler. Each instance is otherwise driven through the API its notifications came from."""
    request_timeout: float = Field(default=30.0, gt=0)
    """Seconds one request to Tacker may take."""
    max_package_bytes: int = Field(default=512 * 1024 * 1024, gt=0)
    """The largest VNF package read from Tacker: it is streamed to a temporary file, never held
    in memory, and a larger one fails the step that reads it."""
    package_timeout: float = Field(default=600.0, gt=0)
    """Seconds the download of one VNF package may take."""
    retry_attempts: int = Field(default=6, gt=0)
    """409 (instance lock) and 5xx are retried in-process with exponential backoff and jitter; past
    this many attempts the step fails as transient and the runner's persisted backoff takes
    over."""
    retry_initial: float = Field(default=0.2, gt=0)
    """First in-process retry delay, in seconds."""
    retry_max: float = Field(default=5.0, gt=0)
    """Largest in-process retry delay, in seconds."""

    vim_key: str = Field(default="k8s", min_length=1)
    """The ``vimConnectionInfo`` key the write-back uses."""
    op_wait_timeout: float = Field(default=120.0, gt=0)
    """Seconds to wait for the MODIFY_INFO op-occ of a write-back to finish."""
    op_poll_interval: float = Field(default=0.5, gt=0)
    """Seconds between polls of that op-occ."""
    echo_intent_ttl: float = Field(default=600.0, gt=0)
    """How long an "expected echo" (recorded before a PATCH whose 202 never arrived: crash,
    timeout) still claims MODIFY_INFO op-occs of its instance."""
    echo_confirm_wait: float = Field(default=5.0, ge=0)
    """Seconds a MODIFY_INFO notification of an instance with a PATCH of ours in flight waits
    for that PATCH's 202 (its op-occ id) before Tacker is asked whose it is: Tacker may
    notify before it answers, and v1 cannot show a MODIFY_INFO op-occ at all."""
    register_vim: bool | None = None
    """Register each cluster as a Kubernetes VIM (``POST /v1.0/vims``) and delete it at
    TERMINATE: ``true`` for every instance, ``false`` for none; unset, for the instances
    of the v1 API only, as Tacker's v1 driver did (a v2 instance gets the access data in
    ``vimConnectionInfo``)."""
    report_status: bool = True
    """After the job of a COMPLETED notification (no hook ran it) ends, done or failed, PATCH an
    ``lccn`` entry (state, operation, opOccId, reason, at) into the instance's ``metadata``, so
    ``openstack vnflcm show`` tells how it went."""
    status_report_timeout: float = Field(default=600.0, gt=0)
    """Seconds a status entry is tried again while Tacker is busy with the instance (409) or
    down."""

    subscribe_on_start: bool = False
    """Ensure our LCCN subscription when ``serve`` starts."""
    callback_uri: str = ""
    """The callback URL Tacker is given; empty: ``http://<http.host>:<http.port><http.path>``."""
    operation_types: Annotated[tuple[str, ...], NoDecode] = ()
    """Subscription filter (``operationTypes``), also applied by the reconciler; empty: all."""
    operation_states: Annotated[tuple[str, ...], NoDecode] = ()
    """Subscription filter (``operationStates``), also applied by the reconciler; empty: all."""
    verbosity: Literal["FULL", "SHORT"] = "FULL"
    """Notification verbosity asked for in a v2 subscription (``FULL`` carries affectedVnfcs and
    changedInfo)."""

    reconcile_interval: float = Field(default=60.0, ge=0)
    """Seconds between polls of ``GET vnf_lcm_op_occs`` for transitions Tacker failed to deliver
    (Tacker v2 sends each notification once); on whenever a Tacker is configured, ``0``: off.
    The first poll starts from the moment ``serve`` first ran against this store."""
    reconcile_overlap: float = Field(default=60.0, ge=0)
    """Seconds re-read before the watermark: ``stateEnteredTime`` is written by Tacker's clock and
    a transition may commit after a later one was read."""

    @field_validator("operation_types", "operation_states", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _string_list(value)

    @model_validator(mode="after")
    def _consistent(self) -> TackerSettings:
        if self.auth_type == "noauth":
            return self
        if not self.auth_url:
            raise ValueError(f"tacker: auth_type {self.auth_type} needs 'auth_url'")
        if self.auth_type == "password":
            if not (self.username or self.user_id) or not self.password.get_secret_value():
                raise ValueError("tacker: password auth needs 'username' and 'password'")
            if not (self.project_name or self.project_id):
                raise ValueError("tacker: password auth needs 'project_name' or 'project_id'")
        else:
            if not (self.application_credential_id or self.application_credential_name):
                raise ValueError(
                    "tacker: v3applicationcredential needs 'application_credential_id' "
                    "(or _name with 'username')"
                )
            if not self.application_credential_secret.get_secret_value():
                raise ValueError("tacker: v3applicationcredential needs its secret")
        return self

    @property
    def configured(self) -> bool:
        """Whether a Tacker is configured at all (an endpoint or a Keystone auth)."""
        return bool(self.endpoint) or self.auth_type != "noauth"


class LogSettings(_Section):
    """Logs on stderr, keyed by ``vnfInstanceId``, ``vnfLcmOpOccId``, ``event_id`` and
    ``job_id``, secrets masked."""

    format: Literal["json", "text"] = "json"
    """``json``: one JSON object a line; ``text``: plain lines."""
    level: str = "INFO"
    """Log level (``debug``, ``info``, ``warning`` ...); ``LCCN_LOG__LEVEL=debug`` also adds
    the traceback to the CLI's one-line errors."""


class TracingSettings(_Section):
    """OpenTelemetry tracing: one trace per event (ingest, job, steps, SSH commands, Tacker
    calls). Needs the ``otel`` extra (``pip install 'lccn-subscriber[otel]'``); without it
    nothing of OpenTelemetry is loaded and ``enabled: true`` fails the start."""

    enabled: bool = False
    """Record spans (and log each event's ``trace_id``)."""
    exporter: Literal["otlp", "none"] = "otlp"
    """``otlp``: send spans over OTLP/HTTP to ``endpoint``; ``none``: record trace ids in the
    store and logs only, export nothing."""
    endpoint: str = ""
    """The OTLP/HTTP traces URL (e.g. ``http://collector:4318/v1/traces``); empty: the
    exporter's own default, or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``."""
    service_name: str = "lccn-subscriber"
    """``service.name`` of the spans' resource."""

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, value: str) -> str:
        if value and not re.match(r"https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value


#: The largest secret file read from ``LCCN_SECRETS_DIR`` (a setting, not a blob).
_MAX_SECRET_BYTES = 64 * 1024


class _SecretsDirSource(EnvSettingsSource):
    """Settings from files, one a setting, each named like its environment variable
    (``lccn_tacker__password``, any case): compose and Kubernetes secrets mounted in a
    directory (``/run/secrets``). The value is the file's text without its surrounding
    whitespace (the trailing newline); files not named ``lccn_*`` are never read."""

    def __init__(self, settings_cls: type[BaseSettings], directory: Path) -> None:
        self._directory = directory
        super().__init__(settings_cls)

    def _load_env_vars(self) -> dict[str, str | None]:
        directory = self._directory
        if not directory.is_dir():
            raise ConfigFileError(f"LCCN_SECRETS_DIR is not a directory: {directory}")
        found: dict[str, str | None] = {}
        for path in sorted(directory.iterdir()):
            name = path.name.lower()
            if not name.startswith("lccn_") or not path.is_file():
                continue
            if path.stat().st_size > _MAX_SECRET_BYTES:
                raise ConfigFileError(f"secret file too large (> 64 KiB): {path}")
            found[name] = path.read_text(encoding="utf-8").strip()
        return found


class Settings(BaseSettings):
    """The whole configuration of one lccn-subscriber process."""

    model_config = SettingsConfigDict(
        env_prefix="LCCN_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    # Set by load_settings() before instantiation; read by the file source.
    _config_file: ClassVar[Path | None] = None

    http: HttpSettings = HttpSettings()
    """The callback listener."""
    database: DatabaseSettings = DatabaseSettings()
    """The event store."""
    dispatch: DispatchSettings = DispatchSettings()
    """Lanes, leases and retries."""
    retention: RetentionSettings = RetentionSettings()
    """Pruning of settled events."""
    handlers: HandlerSettings = HandlerSettings()
    """Extra handler modules."""
    ssh: SshSettings = SshSettings()
    """The SSH executor."""
    cluster: ClusterSettings = ClusterSettings()
    """How the cluster handlers drive the nodes."""
    openstack: OpenStackSettings = OpenStackSettings()
    """Heat and Nova lookups."""
    auth: AuthSettings = AuthSettings()
    """Callback authentication."""
    hooks: HookSettings = HookSettings()
    """The drain hook."""
    relay: RelaySettings = RelaySettings()
    """The relay role (``serve --role relay``)."""
    kafka: KafkaSettings = KafkaSettings()
    """Kafka ingest."""
    tacker: TackerSettings = TackerSettings()
    """The Tacker client."""
    log: LogSettings = LogSettings()
    """Logging."""
    tracing: TracingSettings = TracingSettings()
    """OpenTelemetry tracing (the ``otel`` extra)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        secrets_dir = os.environ.get("LCCN_SECRETS_DIR")
        if secrets_dir:
            sources.append(_SecretsDirSource(settings_cls, Path(secrets_dir)))
        path = cls._config_file
        if path is not None:
            if path.suffix.lower() == ".toml":
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
            else:
                sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> Settings:
    """Build the effective settings.

    Arguments:
        config_file: a YAML (``.yaml``/``.yml``) or TOML (``.toml``) file;
            defaults to ``$LCCN_CONFIG`` when set.
        overrides: per-section values from command-line flags; they win over
            every other source. ``None`` values are ignored.

    Raises:
        ConfigFileError: the file does not exist.
        pydantic.ValidationError: a value is invalid.
    """
    path_text = config_file or os.environ.get("LCCN_CONFIG")
    path = Path(path_text) if path_text else None
    if path is not None and not path.is_file():
        raise ConfigFileError(f"config file not found: {path}")
    Settings._config_file = path
    try:
        base = Settings()
    finally:
        Settings._config_file = None
    if not overrides:
        return base
    data = base.model_dump()
    for section, values in overrides.items():
        for key, value in values.items():
            if value is not None:
                data[section][key] = value
    return Settings.model_validate(data)


def masked(settings: Settings) -> dict[str, Any]:
    """The settings as plain data with every secret replaced by ``'***'``.

    Masked: ``SecretStr`` fields, the password of every URL wherever it sits
    (``user:pass@``: database, Keystone, Kafka, proxies in ``cluster.script_env``),
    and every value under a secret-looking key of a free-form map such as
    ``cluster.script_env`` (``GITHUB_TOKEN``, ``password`` ...).
    """
    from subscriber.redact import MASK, is_secret_key, redact_text, redact_url

    def text(value: str) -> str:
        return redact_text(redact_url(value)) if "://" in value else redact_text(value)

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, SecretStr):
            return MASK if value.get_secret_value() else ""
        if isinstance(value, BaseModel):
            # Model fields that hold secrets are SecretStr: their names decide nothing.
            return {k: walk(getattr(value, k)) for k in type(value).model_fields}
        if isinstance(value, dict):
            return {k: walk(v, str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, key) for v in value]
        if key and is_secret_key(key) and value not in (None, ""):
            return MASK
        if isinstance(value, str):
            return text(value)
        if isinstance(value, os.PathLike):
            return str(value)
        return value

    data: dict[str, Any] = walk(settings)
    data["database"]["url"] = redact_url(settings.database.resolved_url())
    return data
