"""SSH credentials are part of a pooled connection's identity; key files are the operator's.

Against real sshd hosts. Before, connections were pooled per (host, port, user): a job
presenting a wrong password rode on another job's logged-in connection, the operator's
``ssh.client_keys`` (and even ``~/.ssh``'s keys) were offered along with any password,
``ssh_private_key_path`` could name any file of our host (``/dev/zero`` too), and idle
connections stayed open for ever.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from handlers.toolkit.shell import NodeShell
from schemas.cluster_params import parse_cluster_params
from subscriber.config import ClusterSettings, SshSettings
from subscriber.errors import AuthenticationFailed, ConfigError, SshKeyRefused
from subscriber.kernel.ports import ClusterNode, SshTarget
from subscriber.ssh import SshPool
from tests.cluster_fakes import k8s_params

pytestmark = [pytest.mark.asyncio, pytest.mark.ssh]


def _settings(bed: Any, **extra: Any) -> SshSettings:
    return SshSettings(known_hosts=bed.known_hosts, connect_timeout=5.0, **extra)


def _user(bed: Any, password: str, index: int = 0) -> SshTarget:
    return SshTarget(host=bed.hosts[index].address, username=bed.user, password=SecretStr(password))


async def test_a_wrong_password_does_not_ride_on_another_jobs_connection(ssh_bed: Any) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    async with SshPool(_settings(ssh_bed)) as pool:
        first = await pool.run(_user(ssh_bed, ssh_bed.password), "id -un")
        assert first.stdout.strip() == ssh_bed.user
        with pytest.raises(AuthenticationFailed) as info:
            await pool.run(_user(ssh_bed, wrong), "id -un")
        assert wrong not in str(info.value) and ssh_bed.password not in str(info.value)
        # The right password still shares the first job's connection.
        await pool.run(_user(ssh_bed, ssh_bed.password), "true")
        assert pool.connects == 1


async def test_other_pinned_host_keys_open_their_own_connection(ssh_bed: Any) -> None:
    host = ssh_bed.hosts[0]
    async with SshPool(_settings(ssh_bed, client_keys=(ssh_bed.client_key,))) as pool:
        await pool.run(SshTarget(host=host.address), "true")
        pinned = SshTarget(host=host.address, known_hosts=f"{host.address} {host.host_key}")
        await pool.run(pinned, "true")
        assert pool.connects == 2


async def test_operator_keys_are_not_offered_with_the_parameters_password(
    ssh_bed: Any,
) -> None:
    # root accepts the operator's key but no password (PermitRootLogin prohibit-password).
    root = SshTarget(host=ssh_bed.hosts[0].address, username="root", password=SecretStr("x1"))
    async with SshPool(_settings(ssh_bed, client_keys=(ssh_bed.client_key,))) as pool:
        with pytest.raises(AuthenticationFailed):
            await pool.run(root, "id -u")
        keyless = await pool.run(SshTarget(host=ssh_bed.hosts[0].address), "id -u")
        assert keyless.stdout.strip() == "0"  # the operator's key, where nothing else is given


async def test_our_own_home_keys_are_never_offered(
    ssh_bed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(ssh_bed.client_key, home / ".ssh" / "id_ed25519")
    (home / ".ssh" / "id_ed25519").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    root = SshTarget(host=ssh_bed.hosts[0].address, username="root", password=SecretStr("x2"))
    async with SshPool(_settings(ssh_bed)) as pool:
        with pytest.raises(AuthenticationFailed):
            await pool.run(root, "id -u")


# -- ssh_private_key_path --------------------------------------------------------------


def _keyed(bed: Any, key: Path) -> SshTarget:
    return SshTarget(
        host=bed.hosts[0].address,
        username="root",
        client_keys=(key,),
        origin="k8s_cluster_installation_param.master_node",
    )


async def test_a_key_path_needs_the_operators_key_dir(ssh_bed: Any) -> None:
    async with SshPool(_settings(ssh_bed)) as pool:
        with pytest.raises(SshKeyRefused) as info:
            await pool.run(_keyed(ssh_bed, ssh_bed.client_key), "true")
    message = str(info.value)
    assert message.startswith("k8s_cluster_installation_param.master_node.ssh_private_key_path")
    assert "ssh.key_dir is not set" in message and "\n" not in message
    assert pool.connects == 0


async def test_a_key_path_outside_key_dir_is_refused_and_dev_zero_fails_fast(
    ssh_bed: Any, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    good = keys / "id_ed25519"
    shutil.copy(ssh_bed.client_key, good)
    (keys / "escape").symlink_to(ssh_bed.client_key)  # resolves outside key_dir
    (keys / "zero").symlink_to("/dev/zero")
    os.mkfifo(keys / "fifo")
    (keys / "big").write_bytes(b"x" * (64 * 1024 + 1))
    (keys / "not-a-key").write_text("hello\n")
    settings = _settings(ssh_bed, key_dir=keys)
    async with SshPool(settings) as pool:
        for path, why in [
            (ssh_bed.client_key, "not inside ssh.key_dir"),
            (keys / "escape", "not inside ssh.key_dir"),
            (keys / ".." / "keys" / ".." / "outside", "not inside ssh.key_dir"),
            (Path("/dev/zero"), "not inside ssh.key_dir"),
            (keys / "zero", "not inside ssh.key_dir"),
            (keys / "fifo", "not a regular file"),
            (keys / "big", "larger than ssh.max_key_bytes"),
            (keys / "missing", "No such file"),
            (keys / "not-a-key", "not an unencrypted private key"),
            (keys, "not inside ssh.key_dir"),
        ]:
            started = time.monotonic()
            with pytest.raises(SshKeyRefused, match=why):
                await pool.run(_keyed(ssh_bed, path), "true")
            assert time.monotonic() - started < 2.0, path
        assert pool.connects == 0
        # Inside key_dir, a regular key file logs in (no operator key is configured).
        result = await pool.run(_keyed(ssh_bed, good), "id -u")
        assert result.stdout.strip() == "0"


async def test_a_parameters_key_path_is_refused_naming_its_parameter(
    ssh_bed: Any, tmp_path: Path
) -> None:
    params = parse_cluster_params(k8s_params(key="/dev/zero"))
    node = ClusterNode(
        name="master1",
        role="master",
        vnfc_id="v1",
        nic_ip=ssh_bed.hosts[0].address,
        ssh_ip=ssh_bed.hosts[0].address,
    )
    async with SshPool(_settings(ssh_bed, key_dir=tmp_path)) as pool:
        shell = NodeShell(pool, ClusterSettings(), params)
        with pytest.raises(SshKeyRefused) as info:
            await asyncio.wait_for(shell.run(node, "true"), 5)
    assert str(info.value).startswith(
        "k8s_cluster_installation_param.master_node.ssh_private_key_path '/dev/zero' is refused"
    )


# -- idle connections ----------------------------------------------------------------------


async def test_an_idle_pooled_connection_is_closed(ssh_bed: Any) -> None:
    settings = _settings(ssh_bed, client_keys=(ssh_bed.client_key,), idle_timeout=1.0)
    target = SshTarget(host=ssh_bed.hosts[1].address)
    async with SshPool(settings) as pool:
        await pool.run(target, "true")
        await pool.run(target, "true")
        assert pool.connects == 1
        async with asyncio.timeout(5):
            while pool.idle_closed < 1:
                await asyncio.sleep(0.05)
        # A command longer than the idle time keeps its connection.
        await pool.run(target, "sleep 1.5")
        assert pool.idle_closed == 1 and pool.connects == 2


async def test_a_key_dir_that_is_not_a_directory_stops_the_start(tmp_path: Path) -> None:
    settings = SshSettings(host_key_policy="accept-new", key_dir=tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"ssh.key_dir: .*nowhere: not a directory"):
        await SshPool(settings).start()
