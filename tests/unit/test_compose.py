"""compose.yaml, checked without Docker: it parses, its commands and settings names are real.

Every lccn-subscriber service's command parses with the real CLI; every
``LCCN_*`` variable names a real settings field and the whole environment
validates as settings; callback auth is on; no secret has a default value, and the
serving replicas' secrets are compose secrets (files), each a real setting.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from subscriber.cli.root import build_parser
from subscriber.config import Settings, load_settings
from tests import REPO

COMPOSE = REPO / "compose.yaml"
# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}
INTERPOLATION = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|KEY", re.IGNORECASE)
# What the operator exports, for the settings check.
OPERATOR_ENV = {
    "LCCN_DB_PASSWORD": "pw-from-env",
    "LCCN_KEYSTONE_URL": "https://keystone.example:5000/v3",
    "LCCN_TACKER_USER": "tacker-user",
    "LCCN_TACKER_PROJECT": "nfv",
    "LCCN_OPENSTACK_USER": "os-user",
    "LCCN_OPENSTACK_PROJECT": "vnfs",
}


def _secret_variable(key: str) -> bool:
    """Whether a variable holds a secret (not a file's path, nor a policy)."""
    not_secrets = ("LCCN_SECRETS_DIR", "LCCN_SSH__CLIENT_KEYS", "LCCN_SSH__HOST_KEY_POLICY")
    return bool(SECRET_NAME.search(key)) and not key.endswith("_FILE") and key not in not_secrets


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and data.get("services")
    return data


def _ours(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: svc
        for name, svc in compose["services"].items()
        if str(svc.get("image", "")).startswith("lccn-subscriber")
    }


def _interpolate(value: str, env: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name, op, arg = m["name"], m["op"], m["arg"]
        if name in env and (env[name] or op in (None, "-", "?")):
            return env[name]
        if op in (":-", "-"):
            return arg
        raise AssertionError(f"compose would refuse to start without ${name}: {arg}")

    return INTERPOLATION.sub(one, value)


def _environment(svc: dict[str, Any]) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _field_path(model: type[BaseModel], parts: list[str]) -> bool:
    field = model.model_fields.get(parts[0])
    if field is None:
        return False
    if len(parts) == 1:
        return True
    annotation = field.annotation
    return (
        isinstance(annotation, type)
        and issubclass(annotation, BaseModel)
        and _field_path(annotation, parts[1:])
    )


def test_compose_has_our_services() -> None:
    ours = _ours(_compose())
    assert {"db-migrate", "lccn-subscriber"} <= set(ours)


@pytest.mark.parametrize("name", sorted(_ours(_compose())))
def test_each_command_parses_with_the_real_cli(name: str) -> None:
    svc = _ours(_compose())[name]
    command = svc.get("command")
    if command is None:  # the image's CMD
        cmd = re.search(r"^CMD (\[.*\])$", (REPO / "Dockerfile").read_text(), re.M)
        assert cmd is not None
        command = yaml.safe_load(cmd[1])
    if isinstance(command, str):
        command = command.split()
    assert command[0] == "lccn-subscriber", command
    try:
        args = build_parser().parse_args(command[1:])
    except SystemExit as exc:
        raise AssertionError(f"{name}: {command} does not parse with the CLI") from exc
    assert callable(getattr(args, "func", None))


@pytest.mark.parametrize("name", sorted(_ours(_compose())))
def test_every_lccn_variable_is_a_real_setting_and_the_environment_validates(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    compose = _compose()
    svc = _ours(compose)[name]
    env = _environment(svc)
    names = [k for k in env if k.startswith("LCCN_") and k != "LCCN_SECRETS_DIR"]
    assert names
    for key in names:
        parts = key.removeprefix("LCCN_").lower().split("__")
        assert _field_path(Settings, parts), f"{name}: {key} is not a settings field"
    for key in list(os.environ):
        if key.startswith("LCCN_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, _interpolate(value, OPERATOR_ENV))
    if "LCCN_SECRETS_DIR" in env:
        _mount_secrets(compose, svc, tmp_path)
        monkeypatch.setenv("LCCN_SECRETS_DIR", str(tmp_path))
    settings = load_settings()  # validates every value, as the container would
    assert settings.database.url.startswith("postgresql+asyncpg://lccn:pw-from-env@")


def _mount_secrets(compose: dict[str, Any], svc: dict[str, Any], run: Path) -> dict[str, str]:
    """The service's secrets as compose mounts them (``run`` standing for /run/secrets),
    each file holding ``value-of-TARGET``; returns target -> value."""
    declared = compose.get("secrets") or {}
    mounted = {}
    for entry in svc.get("secrets") or []:
        source = entry if isinstance(entry, str) else entry["source"]
        target = source if isinstance(entry, str) else entry.get("target", source)
        assert source in declared and "file" in declared[source], f"{source}: not a file secret"
        assert "/" not in target
        mounted[target] = f"value-of-{target}"
        (run / target).write_text(mounted[target] + "\n")
    return mounted


def test_the_replicas_get_every_secret_from_compose_secrets_and_run_the_cluster_handlers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    compose = _compose()
    svc = _ours(compose)["lccn-subscriber"]
    env = _environment(svc)
    for key in list(os.environ):
        if key.startswith("LCCN_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, _interpolate(value, OPERATOR_ENV))
    assert env["LCCN_SECRETS_DIR"] == "/run/secrets"
    mounted = _mount_secrets(compose, svc, tmp_path)
    monkeypatch.setenv("LCCN_SECRETS_DIR", str(tmp_path))
    settings = load_settings()
    auth = settings.auth
    assert auth.basic.enabled or auth.oauth2.enabled or auth.mtls.enabled
    assert env.get("LCCN_HTTP__HOST") != "0.0.0.0" or auth.basic.enabled or auth.oauth2.enabled
    # Each secret setting is its file's value: none comes from the environment.
    assert auth.basic.password.get_secret_value() == mounted["lccn_auth__basic__password"]
    assert settings.hooks.token is not None
    assert settings.hooks.token.get_secret_value() == mounted["lccn_hooks__token"]
    assert settings.tacker.password.get_secret_value() == mounted["lccn_tacker__password"]
    assert settings.openstack.password.get_secret_value() == mounted["lccn_openstack__password"]
    # The key and known_hosts are mounted where the settings name them.
    assert settings.ssh.client_keys == (Path("/run/secrets/ssh_key"),)
    assert settings.ssh.known_hosts == Path("/run/secrets/known_hosts")
    assert settings.ssh.host_key_policy == "strict"  # read-only known_hosts: nothing recorded
    assert {"ssh_key", "known_hosts"} <= set(mounted)
    assert settings.cluster.handlers == "on"
    assert settings.tacker.auth_type == "password" and settings.openstack.enabled


def test_no_secret_has_a_default_or_a_literal_value() -> None:
    text = COMPOSE.read_text(encoding="utf-8")
    for m in INTERPOLATION.finditer(text):
        if SECRET_NAME.search(m["name"]):
            assert m["op"] in (":?", "?"), f"${{{m['name']}}} must be required, not defaulted"
    for name, svc in _compose()["services"].items():
        for key, value in _environment(svc).items():
            if _secret_variable(key):
                assert INTERPOLATION.fullmatch(value), f"{name}: {key} is a literal secret"
            if "://" in value and "@" in value:  # a URL's userinfo
                userinfo = value.split("://", 1)[1].split("@", 1)[0]
                if ":" in userinfo:
                    password = userinfo.split(":", 1)[1]
                    assert INTERPOLATION.fullmatch(password), f"{name}: {key} has a password"


def test_the_required_secrets_really_are_required() -> None:
    env = _environment(_ours(_compose())["lccn-subscriber"])
    with pytest.raises(AssertionError, match="refuse to start"):
        _interpolate(env["LCCN_DATABASE__URL"], {})
    with pytest.raises(AssertionError, match="refuse to start"):
        _interpolate(env["LCCN_TACKER__AUTH_URL"], {"LCCN_KEYSTONE_URL": ""})
    # No password or token of ours is an environment value at all.
    assert not [k for k in env if _secret_variable(k) and k != "LCCN_DATABASE__URL"]
