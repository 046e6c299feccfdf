"""Configuration: one pydantic-settings model with a frozen section per component.

Sources, highest priority first: command-line flags (applied by the CLI as
overrides), ``LCCN_*`` environment variables (nested with ``__``, e.g.
``LCCN_HTTP__PORT``), a YAML or TOML file given with ``--config`` (or
``LCCN_CONFIG``), then the defaults below.

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
    "RetentionSettings",
    "Settings",
    "SshSettings",
    "TackerSettings",
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
    model_config = ConfigDict(frozen=True, extra="forbid")


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
    port: int = Field(default=8765, ge=0, le=65535)
    path: str = "/lccn/notifications"
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    metrics_host: str = ""
    metrics_port: int = Field(default=9765, ge=0, le=65535)

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
    # SQLite: FULL fsyncs the WAL on every (group) commit, so an acknowledged
    # event survives a power cut, not just a process crash.
    sqlite_synchronous: Literal["OFF", "NORMAL", "FULL"] = "FULL"
    group_commit_max: int = Field(default=256, gt=0)
    busy_timeout: float = Field(default=10.0, gt=0)
    # PostgreSQL: a statement waits this long at most for a row lock, and a
    # session idle inside a transaction this long is ended by the server. A
    # replica paused mid-transaction (SIGSTOP, a frozen VM) would otherwise
    # hold its locks, and stall every other replica's writes, until it wakes.
    lock_timeout: float = Field(default=5.0, gt=0)
    idle_in_transaction_timeout: float = Field(default=10.0, gt=0)

    def resolved_url(self) -> str:
        """The configured URL, or the embedded SQLite default."""
        if self.url:
            return self.url
        return f"sqlite+aiosqlite:///{default_database_path()}"


class DispatchSettings(_Section):
    """Lanes, ordering, leases and retries."""

    # False: this process only ingests (stores and acknowledges); other
    # replicas sharing the database run the jobs.
    enabled: bool = True
    max_parallel_lanes: int = Field(default=16, gt=0)
    reorder_window: float = Field(default=0.3, ge=0)
    lease_ttl: float = Field(default=30.0, gt=0)
    # Safety net for work the in-process wake-up cannot see: events written
    # by another process (a replay CLI, another replica) and expired leases.
    rescan_interval: float = Field(default=2.0, gt=0)
    graceful_timeout: float = Field(default=20.0, ge=0)
    max_attempts: int = Field(default=8, gt=0)
    backoff_initial: float = Field(default=1.0, gt=0)
    backoff_max: float = Field(default=300.0, gt=0)
    worker_id: str = ""
    # ``serve``'s own worker process adds this to its niceness: when the CPU is
    # short, ingest (acknowledging Tacker and Kafka) goes first, jobs wait.
    worker_nice: int = Field(default=10, ge=0, le=19)


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
    max_age: float = Field(default=30 * 86400.0, gt=0)
    interval: float = Field(default=3600.0, gt=0)
    # Rows deleted per transaction: ingest and jobs get the writer in between.
    batch: int = Field(default=500, gt=0)

    @field_validator("max_age", "interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value) if isinstance(value, str) else value


class HandlerSettings(_Section):
    """Extra handler modules: each is imported and its ``register(registry)`` called.

    ``LCCN_HANDLERS__MODULES`` takes a JSON list or comma-separated names.
    """

    modules: Annotated[tuple[str, ...], NoDecode] = ()

    @field_validator("modules", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _string_list(value)


class SshSettings(_Section):
    """The SSH executor that runs the cluster work on the VNF's VMs.

    Host keys are pinned: ``strict`` accepts only keys listed in
    ``known_hosts``; ``accept-new`` records the key of a host seen for the
    first time there (trust on first use) and still rejects a changed key.
    ``client_keys`` are tried for every host, before any password a VNF's
    parameters carry.
    """

    known_hosts: Path | None = None  # default: <data dir>/known_hosts
    host_key_policy: Literal["strict", "accept-new"] = "strict"
    client_keys: Annotated[tuple[Path, ...], NoDecode] = ()  # env: a,b or a JSON list
    port: int = Field(default=22, gt=0, le=65535)
    connect_timeout: float = Field(default=15.0, gt=0)
    # Every command gets one (Tacker's executor has none); steps pass their own.
    command_timeout: float = Field(default=600.0, gt=0)
    keepalive_interval: float = Field(default=15.0, ge=0)
    # Output kept per stream and command: the tail, where errors are.
    max_output_bytes: int = Field(default=64 * 1024, ge=1024)
    # Commands run as `timeout T <remote_shell> -c CMD` (Tacker's ran in the login shell, bash).
    remote_shell: str = "bash"
    # OpenSSH's MaxSessions is 10 by default: stay below it per connection.
    max_sessions_per_host: int = Field(default=8, gt=0)

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

    ``script_env`` is exported for ``install_k8s_cluster.sh`` on every node
    (``K8S_VERSION``, ``K8S_CNI``, ``K8S_SKIP_PHASES`` ...); ``kubectl`` and
    ``kubeadm`` name the tools on the masters (absolute paths where PATH differs).
    """

    # auto: route INSTANTIATE/TERMINATE to the cluster handlers when the clients they
    # need (tacker, openstack) are configured, else leave them to the log handler.
    handlers: Literal["auto", "on", "off"] = "auto"
    scripts_dir: Path | None = None  # default: the scripts shipped with lccn-subscriber
    script_env: dict[str, str] = {}
    kubectl: str = "kubectl"
    kubeadm: str = "kubeadm"
    etcdctl: str = "etcdctl"
    # pod: etcdctl inside the master's etcd static pod (kubectl exec, Tacker's way);
    # host: etcdctl on the master itself (where pods cannot be exec'ed into).
    etcdctl_via: Literal["pod", "host"] = "pod"
    # Run on a master after its haproxy backends changed ("" = leave haproxy alone).
    haproxy_reload: str = "systemctl reload haproxy"
    install_timeout: float = Field(default=2700.0, gt=0)  # Tacker's K8S_INSTALL_TIMEOUT
    kubectl_timeout: float = Field(default=60.0, gt=0)
    # kubectl drain's own --timeout for one leaving node (the drain hook's job).
    drain_timeout: float = Field(default=300.0, gt=0)
    # Seconds to wait for the service-account token controller to fill the Secret.
    token_wait_timeout: float = Field(default=60.0, gt=0)
    # The user's helm_installation_script_path on one master (Tacker's HELM_INSTALL_TIMEOUT).
    helm_timeout: float = Field(default=300.0, gt=0)
    # A registered PersistentVolume must be Available within this (Tacker: 5 x 30 s).
    pv_available_timeout: float = Field(default=150.0, gt=0)

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
    username: str = ""
    password: SecretStr = SecretStr("")
    project_name: str = ""
    user_domain_name: str = "Default"
    project_domain_name: str = "Default"
    region_name: str | None = None
    interface: Literal["public", "internal", "admin"] = "public"
    # sdk calls block: they run in this many threads, never on the event loop.
    max_workers: int = Field(default=4, gt=0, le=64)
    request_timeout: float = Field(default=30.0, gt=0)

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
    username: str = ""
    password: SecretStr = SecretStr("")

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
    client_id: str = ""
    client_password: SecretStr = SecretStr("")
    token_path: str = "/token"
    token_ttl: float = Field(default=300.0, gt=0)
    # The URL Tacker is told to call (subscription); default: this listener + token_path.
    token_endpoint: str = ""

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
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    client_id: str = ""
    client_cert_sha256: str = ""

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


class HookSettings(_Section):
    """The drain hook (``POST {path}``) a VNF package's ``scale_start``/``heal_start``
    script calls so that nodes are drained before Tacker deletes their VMs.

    Off until a bearer token is set (``token``, or ``token_file`` read at start-up);
    the script presents the same token.
    """

    path: str = "/lccn/hooks/drain"
    token: SecretStr = SecretStr("")
    token_file: Path | None = None

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
    oauth2: OAuth2Settings = OAuth2Settings()
    mtls: MtlsSettings = MtlsSettings()
    realm: str = "lccn-subscriber"
    generate: Literal["basic", "oauth2", "off"] = "basic"

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
    topics: Annotated[tuple[str, ...], NoDecode] = ("lccn-notifications",)
    # A regular expression; when set it replaces ``topics`` for consuming.
    topic_pattern: str = ""
    group_id: str = Field(default="lccn-subscriber", min_length=1)
    client_id: str = "lccn-subscriber"
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str = ""
    sasl_password: SecretStr = SecretStr("")
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    ssl_key_password: SecretStr = SecretStr("")
    ssl_check_hostname: bool = True

    # Group membership. A slow store never counts against max_poll_timeout:
    # the poll loop keeps polling (with partitions paused) while appends wait.
    session_timeout: float = Field(default=10.0, gt=0)
    heartbeat_interval: float = Field(default=3.0, gt=0)
    max_poll_timeout: float = Field(default=300.0, gt=0)
    request_timeout: float = Field(default=40.0, gt=0)
    retry_backoff: float = Field(default=0.1, gt=0)
    max_poll_records: int = Field(default=500, gt=0)

    # Offsets are committed in batches, at most this often.
    commit_interval: float = Field(default=1.0, gt=0)
    # Records fetched but not yet stored; above it the partitions are paused.
    max_in_flight: int = Field(default=4000, gt=0)
    # While the store fails, appends are retried with this backoff.
    store_backoff_initial: float = Field(default=0.2, gt=0)
    store_backoff_max: float = Field(default=10.0, gt=0)
    # How often the broker is probed, for readiness.
    health_interval: float = Field(default=2.0, gt=0)
    # On revocation, how long to wait for in-flight appends before committing.
    revoke_drain_timeout: float = Field(default=5.0, ge=0)
    # On stop, how long in-flight appends may finish before they are dropped
    # (not committed, so redelivered later).
    graceful_timeout: float = Field(default=10.0, ge=0)

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
    endpoint: str = ""  # fixed Tacker URL, e.g. http://tacker:9890 (no catalog lookup)
    auth_url: str = ""
    username: str = ""
    user_id: str = ""
    password: SecretStr = SecretStr("")
    user_domain_name: str = "Default"
    project_name: str = ""
    project_id: str = ""
    project_domain_name: str = "Default"
    application_credential_id: str = ""
    application_credential_name: str = ""
    application_credential_secret: SecretStr = SecretStr("")
    service_type: str = "nfv-orchestration"
    interface: Literal["public", "internal", "admin"] = "public"
    region_name: str = ""
    verify_tls: bool = True
    ca_file: str = ""
    auth_threads: int = Field(default=2, gt=0, le=16)
    # noauth request context
    noauth_user_id: str = ""
    noauth_project_id: str = ""
    noauth_roles: str = "admin"
    noauth_token: SecretStr = SecretStr("")

    api_version: Literal["v1", "v2"] = "v2"
    request_timeout: float = Field(default=30.0, gt=0)
    # 409 (instance lock) and 5xx: retried in-process with exponential backoff
    # and jitter; past this many attempts the step fails as transient and the
    # runner's persisted backoff takes over.
    retry_attempts: int = Field(default=6, gt=0)
    retry_initial: float = Field(default=0.2, gt=0)
    retry_max: float = Field(default=5.0, gt=0)

    # write-back
    vim_key: str = Field(default="k8s", min_length=1)
    op_wait_timeout: float = Field(default=120.0, gt=0)
    op_poll_interval: float = Field(default=0.5, gt=0)
    # How long an "expected echo" (recorded before a PATCH whose 202 never
    # arrived: crash, timeout) still claims MODIFY_INFO op-occs of its instance.
    echo_intent_ttl: float = Field(default=600.0, gt=0)
    register_vim: bool = False

    # subscription
    subscribe_on_start: bool = False
    callback_uri: str = ""  # default: http://<http.host>:<http.port><http.path>
    operation_types: Annotated[tuple[str, ...], NoDecode] = ()
    operation_states: Annotated[tuple[str, ...], NoDecode] = ()
    verbosity: Literal["FULL", "SHORT"] = "FULL"

    # reconciler: 0 = off
    reconcile_interval: float = Field(default=0.0, ge=0)
    # Re-read this far before the watermark: stateEnteredTime is written by
    # Tacker's clock and a transition may commit after a later one was read.
    reconcile_overlap: float = Field(default=60.0, ge=0)

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
    format: Literal["json", "text"] = "json"
    level: str = "INFO"


class Settings(BaseSettings):
    """The whole configuration of one lccn-subscriber process."""

    model_config = SettingsConfigDict(
        env_prefix="LCCN_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    # Set by load_settings() before instantiation; read by the file source.
    _config_file: ClassVar[Path | None] = None

    http: HttpSettings = HttpSettings()
    database: DatabaseSettings = DatabaseSettings()
    dispatch: DispatchSettings = DispatchSettings()
    retention: RetentionSettings = RetentionSettings()
    handlers: HandlerSettings = HandlerSettings()
    ssh: SshSettings = SshSettings()
    cluster: ClusterSettings = ClusterSettings()
    openstack: OpenStackSettings = OpenStackSettings()
    auth: AuthSettings = AuthSettings()
    hooks: HookSettings = HookSettings()
    kafka: KafkaSettings = KafkaSettings()
    tacker: TackerSettings = TackerSettings()
    log: LogSettings = LogSettings()

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
