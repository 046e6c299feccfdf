"""The SSH executor: commands and file uploads on the VNF's VMs.

Handlers talk to :class:`~subscriber.kernel.ports.SshExecutor` (a Protocol),
so unit tests can inject an in-memory fake; the service and the ``ssh`` test
tier use :class:`SshPool`, one reused asyncssh connection per (host, port, user)
and credentials: a job never rides on a connection another job logged in with
other credentials or other pinned host keys, and a connection unused for
``idle_timeout`` seconds is closed.
asyncssh itself is imported with the first connection (:mod:`subscriber.ssh.transport`).

What it does better than Tacker's ``RemoteCommandExecutor`` (TACKER.md §1.3):
host keys are pinned (``strict``, or ``accept-new`` = trust on first use), key
authentication as well as the password Tacker's parameters carry, a real
timeout on every command, output bounded to its tail, and errors classified
for the runner. A key file named by a VNF's parameters is read only from inside
``ssh.key_dir``, only if it is a regular file no larger than ``max_key_bytes``;
the operator's ``client_keys`` are offered only to targets that bring neither a
key nor a password of their own (and no other key, not even ``~/.ssh``'s, ever).

Errors (:mod:`subscriber.errors`; all translated from asyncssh in
:func:`subscriber.ssh.transport.ssh_errors`, with ``from exc``)::

    TransientStepError (retriable)
    ├── SshConnectError       cannot connect: refused, unreachable, connect timeout
    ├── SshConnectionLost     an open connection or channel broke
    └── CommandTimeout        a command ran past its timeout (its channel is closed)
    PermanentStepError
    ├── HostKeyRejected       unknown host key under ``strict``, or a changed key
    ├── AuthenticationFailed  every offered key / the password was refused (or none)
    ├── SshKeyRefused         a parameters' key file we may not read (outside key_dir ...)
    ├── SftpFailed            the upload was refused (no such dir, permission)
    └── CommandFailed         non-zero exit, raised by :meth:`CommandResult.check`

A command that exits non-zero is *not* an error of the executor: it returns a
:class:`~subscriber.kernel.ports.CommandResult` and the step decides
(``kubectl get node X`` exiting 1 means "not joined yet"). Everything shown in
logs and error messages is redacted (:func:`subscriber.redact.redact_text` plus
the target's password and the ``secrets`` a caller names).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import enum
import hashlib
import hmac
import logging
import os
import re
import shlex
import stat
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from subscriber.config import SshSettings
from subscriber.errors import (
    CommandTimeout,
    ConfigError,
    SshConnectionLost,
    SshError,
    SshKeyRefused,
)
from subscriber.kernel.ports import CommandResult, SshTarget
from subscriber.lifecycle import Component, State
from subscriber.redact import mask_secrets

if TYPE_CHECKING:
    import asyncssh

__all__ = ["Credentials", "HostKeyPolicy", "KnownHosts", "SshPool", "read_key_file"]

log = logging.getLogger(__name__)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Reads ``NAME base64(value)`` lines from stdin up to an empty line and exports them.
_READ_ENV = (
    'while IFS=" " read -r _n _v && [ -n "$_n" ]; do '
    'export "$_n=$(printf %s "$_v" | base64 -d)"; done; unset _n _v; '
)


_REAPER = "ssh-idle-reaper"  # the pool's task that closes idle connections


class HostKeyPolicy(enum.Enum):
    """What to do with a host key that ``known_hosts`` does not list."""

    STRICT = "strict"
    ACCEPT_NEW = "accept-new"


_E = TypeVar("_E", bound=SshError)


def _error(cls: type[_E], message: str, host: str, **extra: object) -> _E:
    err = cls(message, host=host)
    for name, value in extra.items():
        setattr(err, name, value)
    return err


# --------------------------------------------------------------- known hosts


class KnownHosts:
    """An OpenSSH known_hosts file, re-read on every connect, appended on accept-new.

    The file is small and connects are rare (connections are pooled), so it is
    read afresh each time: an operator's edit takes effect without a restart.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # asyncssh calls the validator synchronously

    def _text(self) -> str:
        try:
            return self.path.read_text()
        except FileNotFoundError:
            return ""

    def load(self, extra: str | None = None) -> asyncssh.SSHKnownHosts:
        import asyncssh  # parsing is asyncssh's (loaded by the first connect anyway)

        text = self._text()
        if extra:
            text += "\n" + extra
        return asyncssh.import_known_hosts(text)

    def knows(self, host: str, addr: str, port: int, extra: str | None = None) -> bool:
        """Whether any key (or CA) is listed for the host: then a new key is a mismatch."""
        matched = self.load(extra).match(host, addr, port if port != 22 else None)
        return bool(matched[0] or matched[1] or matched[2])

    def add(self, host: str, port: int, key: asyncssh.SSHKey) -> bool:
        """Record ``key`` for ``host`` unless some key is listed for it meanwhile."""
        with self._lock:
            if self.knows(host, host, port):
                return False
            name = host if port == 22 else f"[{host}]:{port}"
            algorithm, blob = key.export_public_key("openssh").decode().split()[:2]
            line = f"{name} {algorithm} {blob}\n"  # without the key's comment
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as fh:
                fh.write(line)
            self.path.chmod(0o600)
            return True


def _ssh_errors(
    host: str, action: str, secrets: Sequence[str] = (), *, connecting: bool = False
) -> contextlib.AbstractContextManager[None]:
    """:func:`subscriber.ssh.transport.ssh_errors` (which imports asyncssh)."""
    from subscriber.ssh.transport import ssh_errors

    return ssh_errors(host, action, secrets, connecting=connecting)


# ------------------------------------------------------------------- the pool


class _Tail:
    """Keeps the last ``limit`` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        self.buf += chunk
        if len(self.buf) > self.limit:
            del self.buf[: len(self.buf) - self.limit]
            self.truncated = True

    def text(self) -> str:
        return self.buf.decode("utf-8", errors="replace")


async def _drain(stream: asyncssh.SSHReader[bytes], tail: _Tail) -> None:
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return
        tail.add(chunk)


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a target logs in with, loaded (in memory only, never logged).

    Attributes:
        keys: the parameters' private keys as read, each with the parameter it
            came from (for messages).
        operator_keys: whether ``ssh.client_keys`` are offered (the target brings
            neither a key nor a password).
        digest: a keyed digest of the password, the keys and the pinned host keys;
            with host, port and user it is the pooled connection's identity.
    """

    keys: tuple[tuple[str, bytes], ...]
    operator_keys: bool
    digest: bytes = field(repr=False)


@dataclass
class _Host:
    lock: asyncio.Lock
    sessions: asyncio.Semaphore
    credentials: Credentials
    conn: asyncssh.SSHClientConnection | None = None
    users: int = 0  # runs and uploads holding the entry (it is not reaped meanwhile)
    idle_since: float = 0.0
    slot: bool = False  # holds one of ``max_connections``: its connection is open or opening


def _missing(path: Path) -> str:
    return "no such file" if not path.exists() else "not readable"


def read_key_file(settings: SshSettings, path: Path, what: str, host: str = "") -> bytes:
    """The private key file at ``path``, if the operator lets parameters name it (blocking).

    It must lie inside ``ssh.key_dir`` once every symlink is resolved, be a regular
    file and hold at most ``max_key_bytes``; it is opened once, without following a
    link, and checked on the open file, so ``/dev/zero`` or a FIFO fails at once.

    Arguments:
        what: the parameter, for messages (``...master_node.ssh_private_key_path``).

    Raises:
        SshKeyRefused: any of the above does not hold (the message names ``what``).
    """

    def refused(why: str) -> SshKeyRefused:
        return SshKeyRefused(f"{what} {str(path)!r} is refused: {why}", host=host)

    if settings.key_dir is None:
        raise refused(
            "ssh.key_dir is not set (the operator names the directory that parameters "
            "may take private keys from)"
        )
    root = os.path.realpath(settings.key_dir)
    real = os.path.realpath(path)
    if real == root or os.path.commonpath([root, real]) != root:
        raise refused(f"it is not inside ssh.key_dir ({settings.key_dir})")
    cap = settings.max_key_bytes
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise refused(os.strerror(exc.errno) if exc.errno else "cannot be opened") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refused("not a regular file")
        if info.st_size > cap:
            raise refused(f"larger than ssh.max_key_bytes ({cap} bytes)")
        chunks, size = [], 0
        while chunk := os.read(fd, cap + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                raise refused(f"larger than ssh.max_key_bytes ({cap} bytes)")
        return b"".join(chunks)
    finally:
        os.close(fd)


class SshPool(Component):
    """The asyncssh-backed :class:`SshExecutor`: one reused connection per target.

    Use as ``async with SshPool(settings.ssh) as pool:`` or call
    :meth:`start` / :meth:`stop`. A connection is opened on first use and kept;
    a broken one is replaced on the next call. At most
    ``max_sessions_per_host`` commands or uploads run at once per connection, and
    at most ``max_connections`` connections are open (or opening) at once: a
    call that needs one more closes the connection unused longest, or, while
    every one is in use, waits until a command or upload ends.

    Attributes:
        connects: how many connections were opened (for observability/tests).
        peak_connections: the most connections open or opening at once.
        evicted: idle connections closed to make room for another target's.
        waited: calls that had to wait for a connection slot.
    """

    def __init__(self, settings: SshSettings, *, known_hosts: KnownHosts | None = None) -> None:
        super().__init__()
        self._settings = settings
        self._policy = HostKeyPolicy(settings.host_key_policy)
        self._known_hosts = known_hosts or KnownHosts(settings.resolved_known_hosts())
        self._hosts: dict[tuple[str, int, str, bytes], _Host] = {}
        # Keys the credentials' digests: they are comparable only within this pool.
        self._digest_key = os.urandom(32)
        self.connects = 0
        self.idle_closed = 0
        self.peak_connections = 0
        self.evicted = 0
        self.waited = 0
        self._slots_held = 0
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def known_hosts(self) -> KnownHosts:
        return self._known_hosts

    async def _start(self) -> None:
        """Check the files we were told to use; connections open lazily, on first use.

        Raises:
            ConfigError: a configured client key, or the known_hosts file under
                ``strict`` (nothing could be trusted), cannot be read.
        """
        for key in self._settings.client_keys:
            if not os.access(key, os.R_OK):
                raise ConfigError(f"ssh.client_keys: {key}: {_missing(key)}")
        known = self._settings.known_hosts
        if (
            known is not None
            and self._policy is HostKeyPolicy.STRICT
            and not os.access(known, os.R_OK)
        ):
            raise ConfigError(
                f"ssh.known_hosts: {known}: {_missing(known)} (with host_key_policy strict "
                "no host would be trusted; use accept-new to record keys on first use)"
            )
        key_dir = self._settings.key_dir
        if key_dir is not None and not key_dir.is_dir():
            raise ConfigError(f"ssh.key_dir: {key_dir}: not a directory")

    async def _reap(self) -> None:
        """Close the connections unused for ``idle_timeout`` seconds, forget their entries."""
        limit = self._settings.idle_timeout
        while True:
            await asyncio.sleep(max(0.05, min(limit / 2, 5.0)))
            now = time.monotonic()
            closing, released = [], []
            for key, entry in list(self._hosts.items()):
                if entry.users or entry.lock.locked() or now - entry.idle_since < limit:
                    continue
                del self._hosts[key]
                if entry.conn is not None:
                    closing.append(entry.conn)
                    entry.conn = None
                released.append(entry)
            for conn in closing:
                conn.close()
                self.idle_closed += 1
            for conn in closing:
                with contextlib.suppress(Exception):
                    await conn.wait_closed()
            for entry in released:  # only once their sockets are closed
                self._release_slot(entry)

    async def _stop(self) -> None:
        # Running commands fail as connection lost.
        conns = [h.conn for h in self._hosts.values() if h.conn is not None]
        for host in self._hosts.values():
            host.conn = None
            self._release_slot(host)  # and the waiters, woken, find the pool stopped
        for conn in reversed(conns):
            conn.close()
        for conn in reversed(conns):
            with contextlib.suppress(Exception):
                await conn.wait_closed()

    def __repr__(self) -> str:
        return f"<SshPool {self._state.value} hosts={len(self._hosts)}>"

    # -- connections

    def _port(self, target: SshTarget) -> int:
        return target.port or self._settings.port

    async def _credentials(self, target: SshTarget) -> Credentials:
        """The target's credentials, its key files read (and checked) off the event loop."""
        what = f"{target.origin}.ssh_private_key_path" if target.origin else "ssh_private_key_path"
        host = target.describe(self._settings.port)
        keys = tuple(
            [
                (what, await asyncio.to_thread(read_key_file, self._settings, path, what, host))
                for path in target.client_keys
            ]
        )
        password = target.password.get_secret_value() if target.password is not None else None
        operator = not keys and password is None
        mac = hmac.new(self._digest_key, digestmod=hashlib.sha256)
        for part in (
            b"password" if password is None else b"password:" + password.encode(),
            *(b"key:" + hashlib.sha256(data).digest() for _, data in keys),
            b"operator-keys" if operator else b"own",
            b"known-hosts:" + (target.known_hosts or "").encode(),
        ):
            mac.update(len(part).to_bytes(8, "big") + part)
        return Credentials(keys=keys, operator_keys=operator, digest=mac.digest())

    async def _checkout(self, target: SshTarget) -> _Host:
        """The pool entry of the target and its credentials, held until :meth:`_checkin`."""
        self._ensure_running()
        credentials = await self._credentials(target)
        self._ensure_running()
        key = (target.host, self._port(target), target.username, credentials.digest)
        entry = self._hosts.get(key)
        if entry is None:
            entry = _Host(
                lock=asyncio.Lock(),
                sessions=asyncio.Semaphore(self._settings.max_sessions_per_host),
                credentials=credentials,
            )
            self._hosts[key] = entry
        entry.users += 1
        if self._task(_REAPER) is None:  # started with the first use, not with the pool
            self._spawn(_REAPER, self._reap, restart=True)
        return entry

    def _checkin(self, entry: _Host) -> None:
        entry.users -= 1
        entry.idle_since = time.monotonic()
        if not entry.users and entry.slot:
            self._wake()  # a waiter may now close this connection for its own

    # -- the connection limit (max_connections)

    def _wake(self) -> None:
        """Let every waiter look again for a free slot or an idle connection."""
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _release_slot(self, entry: _Host) -> None:
        if entry.slot:
            entry.slot = False
            self._slots_held -= 1
            self._wake()

    def _idlest(self) -> tuple[tuple[str, int, str, bytes], _Host] | None:
        """The pooled connection unused longest that no call holds, if any."""
        idle = [
            (key, entry)
            for key, entry in self._hosts.items()
            if entry.slot and not entry.users and not entry.lock.locked()
        ]
        return min(idle, key=lambda item: item[1].idle_since, default=None)

    async def _take_slot(self, entry: _Host) -> None:
        """Make ``entry`` hold one of the ``max_connections`` slots.

        Closes the idle connection unused longest when every slot is held; while
        every held connection is in use, waits (without a deadline: each use is
        bounded by its own timeout).

        Raises:
            RuntimeError: the pool stopped meanwhile.
        """
        counted = False
        while True:
            self._ensure_running()
            if self._slots_held < self._settings.max_connections:
                entry.slot = True
                self._slots_held += 1
                self.peak_connections = max(self.peak_connections, self._slots_held)
                return
            found = self._idlest()
            if found is not None:
                key, victim = found
                del self._hosts[key]
                conn, victim.conn = victim.conn, None
                self.evicted += 1
                if conn is not None:
                    conn.close()
                    with contextlib.suppress(Exception):
                        await conn.wait_closed()
                self._release_slot(victim)  # its socket closed: the slot is free
                continue
            if not counted:
                self.waited += 1
                counted = True
            waiter = asyncio.get_running_loop().create_future()
            self._slot_waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()

    async def _connection(self, target: SshTarget, entry: _Host) -> asyncssh.SSHClientConnection:
        async with entry.lock:
            if entry.conn is not None and not entry.conn.is_closed():
                return entry.conn
            entry.conn = None
            if not entry.slot:  # a broken connection's replacement keeps its slot
                await self._take_slot(entry)
            try:
                conn = await self._connect(target, entry.credentials)
            except BaseException:
                self._release_slot(entry)
                raise
            if self.state is not State.RUNNING:  # stopped while we connected
                conn.close()
                self._release_slot(entry)
                raise RuntimeError("SshPool was stopped")
            entry.conn = conn
            self.connects += 1
            return conn

    async def _connect(
        self, target: SshTarget, credentials: Credentials
    ) -> asyncssh.SSHClientConnection:
        # asyncssh (~15 MB) is imported with the first connection, not with this module:
        # a serve that runs no SSH step never holds it.
        from subscriber.ssh.transport import connect

        return await connect(
            target,
            self._settings,
            self._known_hosts,
            self._policy,
            self._port(target),
            credentials,
        )

    # -- the executor

    def _wrap(
        self,
        target: SshTarget,
        command: str,
        sudo: bool,
        env: Mapping[str, str] | None,
        limit: float,
    ) -> tuple[str, bytes]:
        """The command line sent to sshd, and what goes to stdin before the input.

        The command runs under ``timeout`` on the remote side too: closing the
        channel does not stop a command (no PTY, no SIGHUP), so without it a
        timed-out ``kubeadm join`` would run on. ``timeout`` signals the whole
        process group, background jobs included, a second after our deadline.

        ``env`` never goes on the command line (any user of the node sees
        command lines in ``ps``): its values come first on stdin, one
        ``NAME base64(value)`` line each and an empty line, and the remote
        shell exports them before it runs the command.
        """
        prefix, env_lines = "", b""
        for name, value in (env or {}).items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"invalid environment variable name {name!r}")
            env_lines += f"{name} ".encode() + base64.b64encode(value.encode()) + b"\n"
        if env_lines:
            env_lines += b"\n"
            prefix = _READ_ENV
        shell = self._settings.remote_shell
        inner = f"timeout -k 5 {limit + 1:g} {shell} -c {shlex.quote(prefix + command)}"
        if not sudo or target.username == "root":
            return inner, env_lines
        if target.password is not None:
            # The first stdin line is the password: a wrapper shell reads exactly
            # that line and hands it to `sudo -v` through a pipe, so it never
            # reaches the command, whether sudo asks for it or not (NOPASSWD).
            # No `exec`: without a TTY sudo's ticket belongs to the parent process.
            password = target.password.get_secret_value()
            validate = 'IFS= read -r p; printf "%s\\n" "$p" | sudo -S -p "" -v && sudo -n -- '
            stdin = (password + "\n").encode() + env_lines
            return f"{shell} -c {shlex.quote(validate + inner)}", stdin
        return f"sudo -n -- {inner}", env_lines

    async def run(
        self,
        target: SshTarget,
        command: str,
        *,
        command_timeout: float | None = None,
        sudo: bool = False,
        input: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
        secrets: Sequence[str] = (),
    ) -> CommandResult:
        """Run ``command`` (a shell command line) on ``target``.

        Arguments:
            target: where and as whom.
            command: a shell command line, run by ``remote_shell -c``; quote
                arguments yourself.
            command_timeout: seconds before the command is abandoned (its
                channel closed); default ``command_timeout`` from the settings.
            sudo: run as root via sudo (``-S`` with the target's password,
                else ``-n``); no-op for root.
            input: sent to the command's stdin, then EOF.
            env: exported before the command (inside sudo).
            secrets: literal strings to mask wherever the command or its
                output are shown (tokens, keys passed as arguments).

        Returns:
            The result, whatever the exit status: call ``.check()`` to require 0.

        Raises:
            SshConnectError, SshConnectionLost, CommandTimeout: transient.
            HostKeyRejected, AuthenticationFailed, SshKeyRefused: permanent.
            RuntimeError: the pool is not open.
        """
        host = target.describe(self._settings.port)
        limit = command_timeout if command_timeout is not None else self._settings.command_timeout
        full, stdin = self._wrap(target, command, sudo, env, limit)
        if input is not None:
            stdin += input.encode() if isinstance(input, str) else input
        masks = (*secrets, target.password.get_secret_value() if target.password else "")
        shown = mask_secrets(command, masks)
        entry = await self._checkout(target)
        try:
            return await self._run(entry, target, host, full, stdin, shown, masks, limit)
        finally:
            self._checkin(entry)

    async def _run(
        self,
        entry: _Host,
        target: SshTarget,
        host: str,
        full: str,
        stdin: bytes,
        shown: str,
        masks: Sequence[str],
        limit: float,
    ) -> CommandResult:
        conn = await self._connection(target, entry)
        out, err = _Tail(self._settings.max_output_bytes), _Tail(self._settings.max_output_bytes)
        started = time.monotonic()
        async with entry.sessions:
            with _ssh_errors(host, "running a command on", masks):
                process = await conn.create_process(full, encoding=None)
                try:
                    async with asyncio.timeout(limit):
                        if stdin:
                            process.stdin.write(stdin)
                        process.stdin.write_eof()
                        await asyncio.gather(
                            _drain(process.stdout, out), _drain(process.stderr, err)
                        )
                        await process.wait_closed()
                except TimeoutError:
                    partial = self._result(host, shown, None, None, out, err, started, masks)
                    raise _error(
                        CommandTimeout,
                        f"{shown!r} on {host} timed out after {limit:g}s",
                        host,
                        result=partial,
                    ) from None
                finally:
                    # Ends the session; on a timeout the remote `timeout` stops the command.
                    process.close()
        signal = process.exit_signal[0] if process.exit_signal else None
        result = self._result(host, shown, process.exit_status, signal, out, err, started, masks)
        log.debug(
            "ssh %s: %r -> %s in %.3fs",
            host,
            shown,
            result.exit_status if signal is None else f"signal {signal}",
            result.duration,
        )
        return result

    @staticmethod
    def _result(
        host: str,
        shown: str,
        status: int | None,
        signal: str | None,
        out: _Tail,
        err: _Tail,
        started: float,
        masks: Sequence[str],
    ) -> CommandResult:
        return CommandResult(
            host=host,
            command=shown,
            exit_status=status,
            exit_signal=signal,
            stdout=out.text(),
            stderr=err.text(),
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            duration=time.monotonic() - started,
            secrets=tuple(m for m in masks if m),
        )

    async def upload(
        self,
        target: SshTarget,
        source: bytes | str | Path,
        remote_path: str,
        *,
        mode: int = 0o644,
        upload_timeout: float | None = None,
    ) -> None:
        """Write ``source`` (bytes, text, or a local file) to ``remote_path`` over SFTP.

        The file is written as the login user (upload to /tmp and ``sudo mv``
        for root-owned places), then chmod'ed to ``mode``.

        Raises:
            SftpFailed: the remote side refused (no such directory, permission).
            SshConnectError, SshConnectionLost: transient; a timeout is
                ``SshConnectionLost`` too.
            HostKeyRejected, AuthenticationFailed, SshKeyRefused: permanent.
        """
        if isinstance(source, Path):
            data = await asyncio.to_thread(source.read_bytes)
        else:
            data = source if isinstance(source, bytes) else bytes(source, "utf-8")
        host = target.describe(self._settings.port)
        limit = upload_timeout if upload_timeout is not None else self._settings.command_timeout
        entry = await self._checkout(target)
        try:
            conn = await self._connection(target, entry)
            async with entry.sessions:
                with _ssh_errors(host, f"uploading {remote_path} to", ()):
                    try:
                        async with asyncio.timeout(limit), conn.start_sftp_client() as sftp:
                            async with sftp.open(remote_path, "wb") as fh:
                                await fh.write(data)
                            await sftp.chmod(remote_path, mode)
                    except TimeoutError as exc:
                        raise _error(
                            SshConnectionLost, f"uploading {remote_path} to {host} timed out", host
                        ) from exc
        finally:
            self._checkin(entry)
        log.debug("ssh %s: uploaded %d bytes to %s", host, len(data), remote_path)
