"""The asyncssh side of :class:`~subscriber.ssh.SshPool`: connecting, host key
decisions and the translation of asyncssh's errors.

Imported by the pool when it opens its first connection, never with
:mod:`subscriber.ssh`: a service that runs no SSH step does not hold asyncssh
(about 15 MB resident).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator, Sequence

import asyncssh

from subscriber.config import SshSettings
from subscriber.errors import (
    AuthenticationFailed,
    HostKeyRejected,
    LccnError,
    SftpFailed,
    SshConnectError,
    SshConnectionLost,
    SshError,
    SshKeyRefused,
)
from subscriber.kernel.ports import SshTarget
from subscriber.redact import mask_secrets
from subscriber.ssh import Credentials, HostKeyPolicy, KnownHosts, _error

__all__ = ["PolicyClient", "connect", "ssh_errors"]

log = logging.getLogger(__name__)


def _offered_keys(
    host: str, settings: SshSettings, credentials: Credentials
) -> list[asyncssh.SSHKey] | list[str] | None:
    """The keys to offer: the target's own, else (with no password either) the operator's.

    ``None`` turns public-key authentication off: asyncssh would otherwise offer the
    keys it finds in ``~/.ssh`` of the user we run as.
    """
    if credentials.keys:
        loaded = []
        for what, data in credentials.keys:
            try:
                loaded.append(asyncssh.import_private_key(data))
            except (asyncssh.KeyImportError, ValueError):
                raise SshKeyRefused(
                    f"{what} is refused: not an unencrypted private key", host=host
                ) from None
        return loaded
    if credentials.operator_keys and settings.client_keys:
        return [str(p) for p in settings.client_keys]
    return None


async def connect(
    target: SshTarget,
    settings: SshSettings,
    known_hosts: KnownHosts,
    policy: HostKeyPolicy,
    port: int,
    credentials: Credentials,
) -> asyncssh.SSHClientConnection:
    """Open a connection to ``target`` on ``port``, host key checked against ``known_hosts``.

    Arguments:
        credentials: the target's, loaded by the pool (its keys already read and checked).

    Raises:
        SshConnectError, SshConnectionLost: transient.
        HostKeyRejected, AuthenticationFailed, SshKeyRefused: permanent.
    """
    host = target.describe(settings.port)
    password = target.password.get_secret_value() if target.password else None
    keys = _offered_keys(host, settings, credentials)
    if keys is None and password is None:
        raise AuthenticationFailed(
            f"cannot connect to {host}: no credentials (the parameters give no password or "
            "ssh_private_key_path, and ssh.client_keys is empty)",
            host=host,
        )
    client = PolicyClient(known_hosts, policy, port, target.known_hosts)
    started = time.monotonic()
    with ssh_errors(host, "cannot connect to", [password or ""], client, connecting=True):
        async with asyncio.timeout(settings.connect_timeout):
            conn, _ = await asyncssh.create_connection(
                lambda: client,
                target.host,
                port,
                username=target.username,
                password=password,
                client_keys=keys,
                ignore_encrypted=True,
                agent_path=None,
                config=None,
                known_hosts=known_hosts.load(target.known_hosts),
                connect_timeout=settings.connect_timeout,
                login_timeout=settings.connect_timeout,
                keepalive_interval=settings.keepalive_interval or None,
                keepalive_count_max=3,
            )
    log.debug("ssh connected to %s in %.3fs", host, time.monotonic() - started)
    return conn


class PolicyClient(asyncssh.SSHClient):
    """Decides about host keys known_hosts does not list (asyncssh's callback)."""

    def __init__(
        self, store: KnownHosts, policy: HostKeyPolicy, port: int, extra: str | None
    ) -> None:
        self._store = store
        self._policy = policy
        self._port = port
        self._extra = extra
        self.reason = ""

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        if self._store.knows(host, addr, self._port, self._extra):
            self.reason = "host key mismatch: the host presented a different key than pinned"
            return False
        if self._policy is HostKeyPolicy.STRICT:
            self.reason = f"host key unknown and host_key_policy is strict ({self._store.path})"
            return False
        if self._store.add(host, self._port, key):
            log.warning(
                "accept-new: recorded host key %s for %s in %s",
                key.get_fingerprint(),
                host,
                self._store.path,
            )
            return True
        self.reason = "host key mismatch: another key was recorded for this host meanwhile"
        return False


_PERMANENT_SFTP = (
    asyncssh.constants.FX_NO_SUCH_FILE,
    asyncssh.constants.FX_PERMISSION_DENIED,
    asyncssh.constants.FX_NO_SUCH_PATH,
    asyncssh.constants.FX_NOT_A_DIRECTORY,
    asyncssh.constants.FX_FILE_IS_A_DIRECTORY,
    asyncssh.constants.FX_WRITE_PROTECT,
    asyncssh.constants.FX_NO_SPACE_ON_FILESYSTEM,
    asyncssh.constants.FX_QUOTA_EXCEEDED,
)


@contextlib.contextmanager
def ssh_errors(
    host: str,
    action: str,
    secrets: Sequence[str] = (),
    client: PolicyClient | None = None,
    *,
    connecting: bool = False,
) -> Iterator[None]:
    """Translate asyncssh and socket errors into the executor's error tree.

    ``connecting``: nothing has run on the host yet, so a lost connection
    leaves no effect behind (``effect_unknown`` is false), as does a channel
    the server refused to open.
    """
    try:
        yield
    except LccnError:
        raise
    except asyncssh.HostKeyNotVerifiable as exc:
        reason = client.reason if client is not None and client.reason else exc.reason
        raise _error(HostKeyRejected, f"{action} {host}: {reason}", host) from exc
    except asyncssh.PermissionDenied as exc:
        raise _error(
            AuthenticationFailed,
            f"{action} {host}: authentication refused ({mask_secrets(exc.reason, secrets)})",
            host,
        ) from exc
    except asyncssh.SFTPError as exc:
        cls: type[SshError] = SftpFailed if exc.code in _PERMANENT_SFTP else SshConnectionLost
        raise _error(
            cls, f"{action} {host}: SFTP: {mask_secrets(exc.reason, secrets)}", host
        ) from exc
    except (asyncssh.ChannelOpenError, asyncssh.ConnectionLost, asyncssh.DisconnectError) as exc:
        raise _error(
            SshConnectionLost,
            f"{action} {host}: {mask_secrets(str(exc), secrets)}",
            host,
            effect_unknown=not (connecting or isinstance(exc, asyncssh.ChannelOpenError)),
        ) from exc
    except TimeoutError as exc:
        raise _error(SshConnectError, f"{action} {host}: timed out", host) from exc
    except OSError as exc:  # refused, unreachable, DNS, reset
        # asyncio's connect errors carry "Connect call failed (...)" as strerror.
        reason = os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__
        if not connecting:  # a reset of a connection in use: the command may have run
            raise _error(SshConnectionLost, f"{action} {host}: {reason}", host) from exc
        raise _error(SshConnectError, f"{action} {host}: {reason}", host) from exc
    except asyncssh.Error as exc:
        raise _error(
            SshConnectionLost, f"{action} {host}: {mask_secrets(str(exc), secrets)}", host
        ) from exc
