"""The SSH executor without sshd: the Protocol seam, results, wrapping, lifecycle."""

from __future__ import annotations

import gc
from pathlib import Path

import asyncssh
import pytest
from pydantic import SecretStr

from subscriber.config import SshSettings
from subscriber.errors import (
    AuthenticationFailed,
    CommandFailed,
    CommandTimeout,
    HostKeyRejected,
    PermanentStepError,
    SftpFailed,
    SshConnectError,
    SshConnectionLost,
    TransientStepError,
)
from subscriber.kernel.ports import CommandResult, SshExecutor, SshTarget
from subscriber.ssh import SshPool, _ssh_errors
from tests.cluster_fakes import FakeSsh


def result(status: int, stdout: str = "", stderr: str = "", **kw: object) -> CommandResult:
    return CommandResult(
        host="root@h:22",
        command="cmd",
        exit_status=status,
        stdout=stdout,
        stderr=stderr,
        duration=0.1,
        **kw,  # type: ignore[arg-type]
    )


async def test_fake_executor_fits_the_protocol() -> None:
    fake = FakeSsh().on("^ok$", result(0, "fine")).on("^bad$", result(1, stderr="nope"))
    assert isinstance(fake, SshExecutor)
    target = SshTarget(host="10.0.0.1")
    assert (await fake.run(target, "ok")).check().stdout == "fine"
    with pytest.raises(CommandFailed, match="nope"):
        (await fake.run(target, "bad")).check(step="join")
    await fake.upload(target, b"data", "/tmp/x")
    assert [(c.host, c.command) for c in fake.calls] == [
        ("10.0.0.1", "ok"),
        ("10.0.0.1", "bad"),
        ("10.0.0.1", "upload /tmp/x"),
    ]
    assert fake.files == {("10.0.0.1", "/tmp/x"): b"data"}


def test_check_masks_secrets_and_names_the_signal() -> None:
    token = "abc.defghijk0123456"
    failed = result(2, stderr=f"token {token} rejected", secrets=(token,))
    with pytest.raises(CommandFailed) as info:
        failed.check(step="join")
    assert "abc.defghijk" not in str(info.value) and "exit 2" in str(info.value)
    assert info.value.result is failed and info.value.step == "join"
    by_signal = CommandResult(
        host="h",
        command="c",
        exit_status=None,
        stdout="",
        stderr="",
        duration=0,
        exit_signal="TERM",
    )
    with pytest.raises(CommandFailed, match="signal TERM"):
        by_signal.check()


def test_error_classes() -> None:
    for cls in (SshConnectError, SshConnectionLost, CommandTimeout):
        assert issubclass(cls, TransientStepError) and cls.retriable
    for cls in (HostKeyRejected, AuthenticationFailed, SftpFailed, CommandFailed):
        assert issubclass(cls, PermanentStepError) and not cls.retriable


@pytest.mark.parametrize(
    ("raised", "connecting", "unknown"),
    [
        (asyncssh.ConnectionLost("reset"), False, True),  # mid-command: it may have run
        (asyncssh.ConnectionLost("reset"), True, False),  # while connecting: nothing ran
        (asyncssh.ChannelOpenError(1, "refused"), False, False),  # no session: nothing ran
        (ConnectionResetError(104, "reset"), False, True),  # a reset mid-command
    ],
)
def test_a_lost_connection_says_whether_the_command_may_have_run(
    raised: Exception, connecting: bool, unknown: bool
) -> None:
    translated = _ssh_errors("root@h:22", "running a command on", connecting=connecting)
    with pytest.raises(SshConnectionLost) as info, translated:
        raise raised
    assert info.value.effect_unknown is unknown


def test_a_connection_refused_while_connecting_ran_nothing() -> None:
    translated = _ssh_errors("root@h:22", "cannot connect to", connecting=True)
    with pytest.raises(SshConnectError) as info, translated:
        raise ConnectionRefusedError(111, "refused")
    assert info.value.effect_unknown is False
    assert CommandTimeout.effect_unknown and not SshConnectError.effect_unknown


def test_wrap_runs_under_remote_timeout_and_sudo() -> None:
    pool = SshPool(SshSettings(known_hosts=Path("/nonexistent"), host_key_policy="accept-new"))
    root = SshTarget(host="h")
    line, stdin = pool._wrap(root, "echo hi", sudo=True, env={"A": "1 2"}, limit=10)
    assert stdin == b"A MSAy\n\n"  # base64 of the value, first on stdin: never on the line
    assert line.startswith("timeout -k 5 11 bash -c ") and "1 2" not in line
    assert line.endswith("unset _n _v; echo hi'")
    keyed = SshTarget(host="h", username="ubuntu")
    line, stdin = pool._wrap(keyed, "id", sudo=True, env=None, limit=5)
    assert line.startswith("sudo -n -- timeout -k 5 6 bash -c") and stdin == b""
    pw = SshTarget(host="h", username="ubuntu", password=SecretStr("pa ss"))
    line, stdin = pool._wrap(pw, "id", sudo=True, env=None, limit=5)
    assert stdin == b"pa ss\n" and "pa ss" not in line
    assert "sudo -S" in line and "sudo -n -- timeout" in line
    line, stdin = pool._wrap(pw, "id", sudo=False, env=None, limit=5)
    assert stdin == b"" and "sudo" not in line
    line, stdin = pool._wrap(pw, "id", sudo=True, env={"T": "x"}, limit=5)
    assert stdin == b"pa ss\nT eA==\n\n"  # the sudo password line, then the environment


async def test_configured_key_and_strict_known_hosts_must_be_readable(tmp_path: Path) -> None:
    from subscriber.errors import ConfigError

    missing = tmp_path / "id_missing"
    with pytest.raises(ConfigError, match=r"ssh.client_keys: .*id_missing: no such file"):
        await SshPool(SshSettings(client_keys=(missing,))).start()
    with pytest.raises(ConfigError, match=r"ssh.known_hosts: .*: no such file"):
        await SshPool(SshSettings(known_hosts=tmp_path / "kh")).start()
    async with SshPool(SshSettings(known_hosts=tmp_path / "kh", host_key_policy="accept-new")):
        pass  # accept-new creates it when it records the first key


async def test_lifecycle_without_network() -> None:
    pool = SshPool(SshSettings(known_hosts=Path("/nonexistent"), host_key_policy="accept-new"))
    with pytest.raises(RuntimeError, match="start"):
        await pool.run(SshTarget(host="h"), "true")
    async with pool:
        with pytest.raises(RuntimeError, match="cannot start"):
            await pool.start()
    with pytest.raises(RuntimeError, match="stopped"):
        await pool.upload(SshTarget(host="h"), b"", "/tmp/x")


async def test_unstopped_pool_warns() -> None:
    pool = SshPool(SshSettings(known_hosts=Path("/nonexistent"), host_key_policy="accept-new"))
    await pool.start()
    with pytest.warns(ResourceWarning, match="unclosed"):
        del pool
        gc.collect()


def test_target_identity_includes_credentials_but_never_shows_them() -> None:
    a = SshTarget(host="h", username="u", password=SecretStr("x"))
    b = SshTarget(host="h", username="u", password=SecretStr("y"))
    assert a != b and "x" not in repr(a)
    assert a == SshTarget(host="h", username="u", password=SecretStr("x"), origin="elsewhere")
    assert a != SshTarget(host="h", username="u", password=SecretStr("x"), known_hosts="h k")
    assert SshTarget(host="h", client_keys=(Path("/k1"),)) != SshTarget(
        host="h", client_keys=(Path("/k2"),)
    )
    assert a.describe() == "u@h:22"
