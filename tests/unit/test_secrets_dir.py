"""``LCCN_SECRETS_DIR``: settings from files named like their variables (compose and
Kubernetes secrets mounted in a directory), below the environment, above the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from subscriber.config import load_settings, masked
from subscriber.errors import ConfigFileError


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("LCCN_"):
            monkeypatch.delenv(key)


@pytest.fixture
def secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty secrets directory, named by ``LCCN_SECRETS_DIR``."""
    path = tmp_path / "secrets"
    path.mkdir()
    monkeypatch.setenv("LCCN_SECRETS_DIR", str(path))
    return path


def test_a_secret_file_fills_its_setting_nested_and_case_insensitive(
    secrets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (secrets / "lccn_tacker__password").write_text("tacker-pw\n")
    (secrets / "LCCN_HOOKS__TOKEN").write_text("  hook-token\n")
    (secrets / "lccn_auth__basic__password").write_text("cb-pw")
    (secrets / "ssh_key").write_text("not a setting: never read as one")
    (secrets / "lccn_subdir").mkdir()
    monkeypatch.setenv("LCCN_AUTH__BASIC__ENABLED", "true")
    monkeypatch.setenv("LCCN_AUTH__BASIC__USERNAME", "tacker")
    settings = load_settings()
    assert settings.tacker.password.get_secret_value() == "tacker-pw"
    assert settings.hooks.token is not None
    assert settings.hooks.token.get_secret_value() == "hook-token"
    # A nested section is merged: the environment's fields and the file's together.
    assert settings.auth.basic.enabled and settings.auth.basic.username == "tacker"
    assert settings.auth.basic.password.get_secret_value() == "cb-pw"
    assert "tacker-pw" not in repr(masked(settings))


def test_the_environment_wins_over_a_file_and_a_file_over_the_config_file(
    secrets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (secrets / "lccn_tacker__password").write_text("from-file")
    (secrets / "lccn_openstack__password").write_text("os-from-file")
    config = tmp_path / "lccn.yaml"
    config.write_text("openstack:\n  password: from-config\n  username: u\n")
    monkeypatch.setenv("LCCN_TACKER__PASSWORD", "from-env")
    settings = load_settings(config)
    assert settings.tacker.password.get_secret_value() == "from-env"
    assert settings.openstack.password.get_secret_value() == "os-from-file"
    assert settings.openstack.username == "u"


def test_a_missing_directory_or_an_unknown_setting_stops_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LCCN_SECRETS_DIR", str(tmp_path / "absent"))
    with pytest.raises(ConfigFileError, match="not a directory"):
        load_settings()
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "lccn_tacker__pasword").write_text("typo")
    monkeypatch.setenv("LCCN_SECRETS_DIR", str(secrets))
    with pytest.raises(Exception, match="pasword"):
        load_settings()
