"""Authentication to Tacker: noauth headers, or a Keystone v3 session run off the event loop.

keystoneauth1 is synchronous (``requests``); every call into it runs in a
small, bounded thread pool owned by :class:`KeystoneAuth`, never on the loop.
keystoneauth1 caches the token and refetches it shortly before it expires;
after a 401 from Tacker the client calls :meth:`TackerAuth.invalidate` and
tries once more with a new token.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from subscriber.config import TackerSettings
from subscriber.errors import TackerRejected
from subscriber.tacker.errors import keystone_errors

__all__ = ["KeystoneAuth", "NoAuth", "TackerAuth", "build_auth", "preload_auth"]

log = logging.getLogger(__name__)


class TackerAuth(Protocol):
    """Where Tacker is and which headers authenticate a request to it."""

    async def endpoint(self) -> str:
        """Tacker's base URL (no trailing slash)."""
        ...

    async def headers(self) -> dict[str, str]:
        """Headers to add to every request (a token, or the noauth context)."""
        ...

    async def invalidate(self) -> None:
        """Forget the token (after a 401), so the next call gets a new one."""
        ...

    def close(self) -> None: ...


class NoAuth:
    """Tacker with ``auth_strategy = noauth``: a fixed endpoint and the context headers."""

    def __init__(self, settings: TackerSettings) -> None:
        if not settings.endpoint:
            raise TackerRejected("tacker: auth_type noauth needs 'endpoint'")
        self._endpoint = settings.endpoint.rstrip("/")
        self._headers: dict[str, str] = {}
        if settings.noauth_user_id:
            self._headers["X-User-Id"] = settings.noauth_user_id
        if settings.noauth_project_id:
            self._headers["X-Project-Id"] = settings.noauth_project_id
            self._headers["X-Tenant-Id"] = settings.noauth_project_id
        if settings.noauth_roles and (settings.noauth_user_id or settings.noauth_project_id):
            self._headers["X-Roles"] = settings.noauth_roles
        token = settings.noauth_token.get_secret_value()
        if token:
            self._headers["X-Auth-Token"] = token

    async def endpoint(self) -> str:
        return self._endpoint

    async def headers(self) -> dict[str, str]:
        return dict(self._headers)

    async def invalidate(self) -> None:
        return None

    def close(self) -> None:
        return None


class KeystoneAuth:
    """A keystoneauth1 v3 session (password or application credential).

    Arguments:
        settings: the ``tacker`` section.
    """

    def __init__(self, settings: TackerSettings) -> None:
        # Imported here: keystoneauth1 and requests (~7 MB) only load with Keystone auth.
        from keystoneauth1 import session as ks_session
        from keystoneauth1.identity import v3

        self._settings = settings
        self._pool = ThreadPoolExecutor(settings.auth_threads, thread_name_prefix="lccn-keystone")
        plugin: Any
        if settings.auth_type == "password":
            plugin = v3.Password(
                auth_url=settings.auth_url,
                username=settings.username or None,
                user_id=settings.user_id or None,
                password=settings.password.get_secret_value(),
                user_domain_name=settings.user_domain_name if not settings.user_id else None,
                project_name=settings.project_name or None,
                project_id=settings.project_id or None,
                project_domain_name=(
                    settings.project_domain_name if settings.project_name else None
                ),
            )
        else:
            plugin = v3.ApplicationCredential(
                auth_url=settings.auth_url,
                application_credential_id=settings.application_credential_id or None,
                application_credential_name=settings.application_credential_name or None,
                application_credential_secret=(
                    settings.application_credential_secret.get_secret_value()
                ),
                username=settings.username or None,
                user_domain_name=settings.user_domain_name if settings.username else None,
            )
        verify: bool | str = settings.ca_file or settings.verify_tls
        self._session = ks_session.Session(auth=plugin, verify=verify)
        self._endpoint: str | None = settings.endpoint.rstrip("/") or None

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        with keystone_errors("Keystone"):
            return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    async def endpoint(self) -> str:
        if self._endpoint is None:
            s = self._settings
            url = await self._call(
                self._session.get_endpoint,
                service_type=s.service_type,
                interface=s.interface,
                region_name=s.region_name or None,
            )
            if not url:
                raise TackerRejected(
                    f"no {s.service_type!r} endpoint ({s.interface}) in the Keystone catalog"
                )
            self._endpoint = str(url).rstrip("/")
        return self._endpoint

    async def headers(self) -> dict[str, str]:
        token = await self._call(self._session.get_token)
        return {"X-Auth-Token": str(token)}

    async def invalidate(self) -> None:
        await self._call(self._session.invalidate)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._session.session.close()


def build_auth(settings: TackerSettings) -> TackerAuth:
    """The auth the ``tacker`` section asks for."""
    if settings.auth_type == "noauth":
        return NoAuth(settings)
    return KeystoneAuth(settings)


def preload_auth(settings: TackerSettings) -> None:
    """Import now what :func:`build_auth` will import for ``settings`` (keystoneauth1).

    ``serve`` calls it before it forks its worker: both processes start a Tacker
    client, and share the library copy-on-write instead of each importing it.
    """
    if settings.auth_type != "noauth":
        from keystoneauth1 import exceptions, session  # noqa: F401
        from keystoneauth1.identity import v3  # noqa: F401
