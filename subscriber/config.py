"""Configuration: one pydantic-settings model with a frozen section per component.

Sources, highest priority first: command-line flags (applied by the CLI as
overrides), ``LCCN_*`` environment variables (nested with ``__``, e.g.
``LCCN_HTTP__PORT``), a YAML or TOML file given with ``--config`` (or
``LCCN_CONFIG``), then the defaults below.

Each component receives only its own section. Times are float seconds named
``*_timeout`` / ``*_interval``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

__all__ = [
    "DatabaseSettings",
    "DispatchSettings",
    "HandlerSettings",
    "HttpSettings",
    "LogSettings",
    "Settings",
    "SshSettings",
    "default_data_dir",
    "default_database_path",
    "load_settings",
    "masked",
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


class HttpSettings(_Section):
    """The callback listener Tacker POSTs notifications to."""

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    path: str = "/lccn/notifications"
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)

    @field_validator("path")
    @classmethod
    def _path_absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value.rstrip("/") or "/"


class DatabaseSettings(_Section):
    """The event store: an SQLAlchemy async URL (SQLite file or PostgreSQL)."""

    url: str = ""
    # SQLite: FULL fsyncs the WAL on every (group) commit, so an acknowledged
    # event survives a power cut, not just a process crash.
    sqlite_synchronous: Literal["OFF", "NORMAL", "FULL"] = "FULL"
    group_commit_max: int = Field(default=256, gt=0)
    busy_timeout: float = Field(default=10.0, gt=0)

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


class HandlerSettings(_Section):
    """Extra handler modules: each is imported and its ``register(registry)`` called."""

    modules: tuple[str, ...] = ()


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
    client_keys: tuple[Path, ...] = ()
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

    def resolved_known_hosts(self) -> Path:
        """The configured known_hosts file, or ``<data dir>/known_hosts``."""
        return (
            self.known_hosts if self.known_hosts is not None else default_data_dir() / "known_hosts"
        )


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
    handlers: HandlerSettings = HandlerSettings()
    ssh: SshSettings = SshSettings()
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


class ConfigFileError(ValueError):
    """The configuration file is missing or unreadable."""


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
    """The settings as plain data with every secret replaced by ``'***'``."""

    def walk(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return "***" if value.get_secret_value() else ""
        if isinstance(value, BaseModel):
            return {k: walk(getattr(value, k)) for k in type(value).model_fields}
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        return value

    from subscriber.redact import redact_url

    data: dict[str, Any] = walk(settings)
    data["database"]["url"] = redact_url(settings.database.resolved_url())
    return data
