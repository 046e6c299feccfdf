"""SshPool against real sshd hosts: auth, host-key policy, timeouts, capture, SFTP, reuse."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

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
from subscriber.kernel.ports import SshExecutor, SshTarget
from subscriber.lifecycle import State
from subscriber.ssh import SshPool

from .conftest import root_target

pytestmark = pytest.mark.ssh


def password_target(bed: Any, index: int = 0, password: str | None = None) -> SshTarget:
    return SshTarget(
        host=bed.hosts[index].address,
        username=bed.user,
        password=SecretStr(password if password is not None else bed.password),
    )


async def test_key_auth_runs_on_the_right_host(bed: Any, pool: SshPool) -> None:
    assert isinstance(pool, SshExecutor)
    for index in (0, 1):
        result = await pool.run(root_target(bed, index), "hostname; id -u; hostname -I")
        assert result.ok, result
        name, uid, addresses = result.stdout.split("\n")[:3]
        assert name == bed.hosts[index].name
        assert uid == "0"
        assert addresses.split() == [bed.hosts[index].address]


async def test_password_auth_and_sudo(bed: Any, tmp_path: Path) -> None:
    # No client keys at all: only the password can log in.
    settings = SshSettings(known_hosts=bed.known_hosts, connect_timeout=5)
    async with SshPool(settings) as pool:
        target = password_target(bed, 1)
        plain = await pool.run(target, "id -un")
        assert plain.stdout.strip() == bed.user
        elevated = await pool.run(target, "id -u; cat", sudo=True, input="data-after-password")
        # The password went to sudo, not to the command's stdin.
        assert elevated.stdout.split("\n")[:2] == ["0", "data-after-password"]
        assert bed.password not in elevated.stdout + elevated.stderr


async def test_wrong_password_is_permanent_and_not_shown(bed: Any) -> None:
    settings = SshSettings(known_hosts=bed.known_hosts, connect_timeout=5)
    wrong = f"wrong-{uuid.uuid4().hex}"
    async with SshPool(settings) as pool:
        with pytest.raises(AuthenticationFailed) as info:
            await pool.run(password_target(bed, 0, wrong), "true")
    assert isinstance(info.value, PermanentStepError)
    assert not info.value.retriable
    assert wrong not in str(info.value)
    assert bed.user in str(info.value)


async def test_strict_rejects_unknown_host_key(bed: Any, tmp_path: Path) -> None:
    known = tmp_path / "empty_known_hosts"
    known.touch()
    settings = SshSettings(known_hosts=known, client_keys=(bed.client_key,))
    async with SshPool(settings) as pool:
        with pytest.raises(HostKeyRejected) as info:
            await pool.run(root_target(bed, 0), "true")
    assert not info.value.retriable
    assert "unknown" in str(info.value)
    assert known.read_text() == ""  # strict records nothing


async def test_strict_rejects_a_changed_host_key(bed: Any, tmp_path: Path) -> None:
    # Pin host 1's key for host 0's address: what a replaced (or spoofed) VM looks like.
    pinned = tmp_path / "known_hosts"
    pinned.write_text(f"{bed.hosts[0].address} {bed.hosts[1].host_key}\n")
    for policy in ("strict", "accept-new"):
        settings = SshSettings(
            known_hosts=pinned, client_keys=(bed.client_key,), host_key_policy=policy
        )
        async with SshPool(settings) as pool:
            with pytest.raises(HostKeyRejected, match="mismatch"):
                await pool.run(root_target(bed, 0), "true")
    assert pinned.read_text().count("\n") == 1  # accept-new did not add a second key


async def test_accept_new_records_the_key_then_strict_trusts_it(bed: Any, tmp_path: Path) -> None:
    store = tmp_path / "tofu" / "known_hosts"
    settings = SshSettings(
        known_hosts=store, client_keys=(bed.client_key,), host_key_policy="accept-new"
    )
    async with SshPool(settings) as pool:
        assert (await pool.run(root_target(bed, 2), "true")).ok
    assert store.read_text() == f"{bed.hosts[2].address} {bed.hosts[2].host_key}\n"
    strict = SshSettings(known_hosts=store, client_keys=(bed.client_key,))
    async with SshPool(strict) as pool:
        assert (await pool.run(root_target(bed, 2), "true")).ok
        with pytest.raises(HostKeyRejected):  # still strict for the others
            await pool.run(root_target(bed, 3), "true")


async def test_command_timeout_is_transient(bed: Any, pool: SshPool) -> None:
    marker = uuid.uuid4().hex
    started = time.monotonic()
    with pytest.raises(CommandTimeout) as info:
        await pool.run(
            root_target(bed, 0), f"echo started-{marker}; exec sleep 30", command_timeout=0.5
        )
    assert time.monotonic() - started < 5
    assert isinstance(info.value, TransientStepError) and info.value.retriable
    assert info.value.result is not None
    assert f"started-{marker}" in info.value.result.stdout
    # The connection is still usable afterwards.
    assert (await pool.run(root_target(bed, 0), "echo ok")).stdout == "ok\n"


async def test_timed_out_command_is_killed_on_the_host(bed: Any, pool: SshPool) -> None:
    marker = uuid.uuid4().hex[:8]
    target = root_target(bed, 4)
    with pytest.raises(CommandTimeout):
        await pool.run(
            target,
            f"(exec -a sleeper-{marker} sleep 30) & exec -a sleeper-{marker} sleep 31",
            command_timeout=0.3,
        )
    probe = f"ps -eo args | grep -c '[s]leeper-{marker}'"
    assert (await pool.run(target, probe)).stdout.strip() != "0"  # still running now
    deadline = time.monotonic() + 10
    while (await pool.run(target, probe)).stdout.strip() != "0":
        assert time.monotonic() < deadline, "timed-out command still running on the host"
        await asyncio.sleep(0.2)


async def test_unreachable_host_is_transient(bed: Any, ssh_settings: SshSettings) -> None:
    settings = ssh_settings.model_copy(update={"connect_timeout": 1.0})
    async with SshPool(settings) as pool:
        started = time.monotonic()
        with pytest.raises(SshConnectError) as info:
            await pool.run(SshTarget(host=bed.unused_address), "true")
        assert time.monotonic() - started < 5
        assert info.value.retriable
        with pytest.raises(SshConnectError, match="refused"):
            await pool.run(SshTarget(host=bed.hosts[0].address, port=2222), "true")


async def test_exit_status_stderr_and_check(bed: Any, pool: SshPool) -> None:
    result = await pool.run(root_target(bed), "echo out; echo err >&2; exit 3")
    assert (result.exit_status, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.ok
    with pytest.raises(CommandFailed) as info:
        result.check(step="probe")
    assert info.value.step == "probe" and not info.value.retriable
    assert "exit 3" in str(info.value) and "err" in str(info.value)
    ok = (await pool.run(root_target(bed), "echo fine")).check()
    assert ok.stdout == "fine\n"


async def test_secrets_are_redacted_in_errors(bed: Any, pool: SshPool) -> None:
    token = f"abcdef.{uuid.uuid4().hex[:16]}"
    result = await pool.run(
        root_target(bed),
        f"echo joining with {token} >&2; echo password=hunter2-{token[:4]} >&2; exit 1",
        secrets=[token],
    )
    assert token in result.stderr  # raw output stays available to the step
    assert token not in result.command
    with pytest.raises(CommandFailed) as info:
        result.check()
    text = str(info.value)
    assert token not in text and "hunter2" not in text and "***" in text


async def test_output_is_bounded_to_its_tail(bed: Any, ssh_settings: SshSettings) -> None:
    settings = ssh_settings.model_copy(update={"max_output_bytes": 4096})
    async with SshPool(settings) as pool:
        result = await pool.run(
            root_target(bed),
            "head -c 300000 /dev/zero | tr '\\0' a; echo; echo END; "
            "head -c 100000 /dev/zero | tr '\\0' b >&2; echo >&2; echo ERR-END >&2",
        )
    assert result.ok
    assert len(result.stdout) == 4096 and result.stdout_truncated
    assert result.stdout.endswith("a\nEND\n")
    assert len(result.stderr) == 4096 and result.stderr.endswith("b\nERR-END\n")


async def test_env_and_input(bed: Any, pool: SshPool) -> None:
    result = await pool.run(
        root_target(bed), 'echo "$GREETING"; cat', env={"GREETING": "hi there; $x"}, input="in"
    )
    assert result.stdout == "hi there; $x\nin"
    with pytest.raises(ValueError, match="environment"):
        await pool.run(root_target(bed), "true", env={"bad name": "x"})


@pytest.mark.parametrize("as_root", [True, False], ids=["root", "sudo-with-password"])
async def test_env_values_never_reach_a_command_line(
    bed: Any, pool: SshPool, as_root: bool
) -> None:
    """Any user of a node sees command lines in ps: env values travel on stdin."""
    value = "tok-" + uuid.uuid4().hex + " with 'quotes' & $x\nand a second line"
    target = root_target(bed, 2) if as_root else password_target(bed, 2)
    # While the command runs, every process's command line on the host, as ps shows it.
    result = await pool.run(
        target,
        'ps -eo args > /tmp/ps-seen; printf %s "$LCCN_SECRET"; echo; cat',
        sudo=True,
        env={"LCCN_SECRET": value, "OTHER": "x"},
        input="the input",
    )
    assert result.ok, result.stderr
    assert result.stdout == value + "\nthe input"
    seen = (await pool.run(root_target(bed, 2), "cat /tmp/ps-seen")).stdout
    assert "ps -eo args" in seen and value.split()[0] not in seen


async def test_sftp_upload(bed: Any, pool: SshPool, tmp_path: Path) -> None:
    name = f"/tmp/upload-{uuid.uuid4().hex}.sh"
    local = tmp_path / "script.sh"
    local.write_text('#!/bin/sh\necho uploaded "$1"\n')
    await pool.upload(root_target(bed, 1), local, name, mode=0o755)
    result = await pool.run(root_target(bed, 1), f"stat -c %a {name}; {name} x")
    assert result.stdout == "755\nuploaded x\n"
    # Private /tmp: the other host has no such file.
    assert not (await pool.run(root_target(bed, 0), f"test -e {name}")).ok
    await pool.upload(password_target(bed, 1), b"data", f"/tmp/{uuid.uuid4().hex}")
    with pytest.raises(SftpFailed) as info:
        await pool.upload(root_target(bed, 1), b"x", "/nonexistent-dir/file")
    assert not info.value.retriable


async def test_connection_reuse_and_reconnect(bed: Any, pool: SshPool) -> None:
    target = root_target(bed, 3)
    results = await asyncio.gather(*(pool.run(target, f"echo {i}") for i in range(12)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]
    assert pool.connects == 1  # concurrent first use shares one connection
    # Kill the sshd session process serving us: that command's connection is
    # lost (transient), the next call reconnects.
    with pytest.raises(SshConnectionLost) as info:
        await pool.run(
            target,
            'p=$$; while [ "$(ps -o comm= -p $p)" != sshd ]; do p=$(ps -o ppid= -p $p); done;'
            " kill -9 $p",
        )
    assert info.value.retriable
    assert (await pool.run(target, "echo again")).stdout == "again\n"
    assert pool.connects == 2


async def test_pool_lifecycle(ssh_settings: SshSettings, bed: Any) -> None:
    pool = SshPool(ssh_settings)
    assert pool.state is State.UNOPENED
    with pytest.raises(RuntimeError):
        await pool.run(root_target(bed), "true")
    await pool.start()
    with pytest.raises(RuntimeError):
        await pool.start()
    await pool.run(root_target(bed), "true")
    await pool.stop()
    await pool.stop()  # idempotent
    assert pool.state is State.STOPPED
    with pytest.raises(RuntimeError):
        await pool.run(root_target(bed), "true")


async def test_password_login_survives_the_machine_replacing_its_account_files(
    bed: Any,
) -> None:
    """``adduser`` (an apt install elsewhere on the machine) replaces /etc/passwd and
    /etc/shadow by rename; the hosts' accounts must not come undone with them."""
    for name in ("passwd", "shadow", "group"):
        real = Path("/etc") / name
        stat = real.stat()
        copy = real.with_name(f".{name}.lccn-test-{uuid.uuid4().hex[:6]}")
        copy.write_bytes(real.read_bytes())
        copy.chmod(stat.st_mode & 0o7777)
        os.chown(copy, stat.st_uid, stat.st_gid)
        os.replace(copy, real)  # same content, new inode: what adduser does
    settings = SshSettings(known_hosts=bed.known_hosts, connect_timeout=5)
    async with SshPool(settings) as pool:
        result = await pool.run(password_target(bed, 0), "id -un")
    assert result.stdout.strip() == bed.user
