"""Heat and Nova reads: :class:`~subscriber.kernel.ports.OpenStackLookups` on openstacksdk.

openstacksdk is blocking, so every call runs in a small thread pool owned by
:class:`OpenStackClient` (never on the event loop). Its errors are translated
in one place, :func:`_openstack_errors` (the classes are in :mod:`subscriber.errors`):

* no answer, a timeout, 5xx or 429 -> :class:`OpenStackUnavailable` (transient:
  the runner retries with backoff);
* 401/403 -> :class:`OpenStackAuthFailed`, 404 -> :class:`OpenStackNotFound`,
  any other 4xx -> :class:`OpenStackRequestFailed` (permanent).

Messages name the call and the status, never credentials or tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from subscriber.config import OpenStackSettings
from subscriber.errors import (
    OpenStackAuthFailed,
    OpenStackError,
    OpenStackNotFound,
    OpenStackRequestFailed,
    OpenStackUnavailable,
)
from subscriber.kernel.ports import PortAddresses, ServerPlacement
from subscriber.lifecycle import Component
from subscriber.redact import redact_text

__all__ = ["OpenStackClient"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def _status_error(status: int, what: str) -> OpenStackError:
    if status in (401, 403):
        return OpenStackAuthFailed(
            f"{what}: OpenStack refused our credentials ({status}); check openstack.username, "
            "password, project and domains",
            status=status,
        )
    if status == 404:
        return OpenStackNotFound(f"{what}: not found (404)", status=status)
    if status >= 500 or status == 429:
        return OpenStackUnavailable(f"{what}: OpenStack answered {status}", status=status)
    return OpenStackRequestFailed(f"{what}: OpenStack answered {status}", status=status)


@contextlib.contextmanager
def _openstack_errors(what: str) -> Iterator[None]:
    """Translate keystoneauth/openstacksdk errors raised inside into :class:`OpenStackError`."""
    from keystoneauth1 import exceptions as ks
    from openstack import exceptions as sdk

    try:
        yield
    except OpenStackError:
        raise
    except sdk.HttpException as exc:
        status = exc.status_code
        if status is None:
            raise OpenStackUnavailable(f"{what}: no HTTP answer") from exc
        raise _status_error(int(status), what) from exc
    except ks.http.HttpError as exc:
        raise _status_error(int(exc.http_status or 500), what) from exc
    except (ks.ConnectFailure, ks.ConnectionError, ks.RequestTimeout, TimeoutError) as exc:
        raise OpenStackUnavailable(
            f"{what}: OpenStack did not answer ({type(exc).__name__})"
        ) from exc
    except ks.Unauthorized as exc:
        raise _status_error(401, what) from exc
    except ks.ClientException as exc:
        # Catalog/endpoint problems and the like: configuration, not load.
        raise OpenStackRequestFailed(f"{what}: {redact_text(type(exc).__name__)}") from exc
    except sdk.SDKException as exc:
        raise OpenStackRequestFailed(f"{what}: {type(exc).__name__}") from exc


def _resource_path(stack_id: str, resource: str) -> str:
    """``/stacks/{name}/{id}/resources/{resource}``, every part one escaped segment.

    Raises:
        OpenStackRequestFailed: a part is empty, ``.`` or ``..`` (it would name another
            resource once the path is normalised); nothing is sent.
    """
    parts = [*stack_id.split("/"), resource]
    if any(part in ("", ".", "..") for part in parts) or len(parts) > 3:
        raise OpenStackRequestFailed(
            f"Heat resource {resource!r} of stack {stack_id!r}: not a stack name/id and a "
            "resource name"
        )
    *stack, name = (quote(part, safe="") for part in parts)
    return f"/stacks/{'/'.join(stack)}/resources/{name}"


class OpenStackClient(Component):
    """Heat resource and Nova server lookups through openstacksdk.

    Usage::

        async with OpenStackClient(settings.openstack) as lookups:
            ports = await lookups.port_addresses("vnf-x/uuid", "masterNode_CP1")

    Arguments:
        settings: the ``openstack`` section (password auth).
        connection_factory: builds the ``openstack.connection.Connection``
            (tests may hand their own); called in a pool thread.
    """

    def __init__(
        self,
        settings: OpenStackSettings,
        *,
        connection_factory: Callable[[OpenStackSettings], Any] | None = None,
    ) -> None:
        if not settings.enabled:
            raise ValueError("openstack.auth_url is not set")
        super().__init__()
        self._settings = settings
        self._factory = connection_factory or _connect
        self._pool: ThreadPoolExecutor | None = None
        self._conn: Any = None
        self._conn_lock = asyncio.Lock()

    async def _start(self) -> None:
        # Only the pool: the connection authenticates on first use.
        self._pool = ThreadPoolExecutor(
            self._settings.max_workers, thread_name_prefix="lccn-openstack"
        )

    async def _stop(self) -> None:
        # The connection first, then the pool it runs in.
        pool, conn = self._pool, self._conn
        self._pool = self._conn = None
        if pool is not None:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await asyncio.get_running_loop().run_in_executor(pool, conn.close)
            await asyncio.to_thread(pool.shutdown, wait=True)

    def __repr__(self) -> str:
        return f"<OpenStackClient {self._settings.auth_url} {self._state.value}>"

    async def _call(self, what: str, fn: Callable[[Any], T]) -> T:
        self._ensure_running()
        assert self._pool is not None
        loop = asyncio.get_running_loop()
        pool = self._pool
        async with self._conn_lock:
            if self._conn is None:
                with _openstack_errors("connecting to OpenStack"):
                    self._conn = await loop.run_in_executor(pool, self._factory, self._settings)
        conn = self._conn

        def guarded() -> T:
            with _openstack_errors(what):
                return fn(conn)

        return await loop.run_in_executor(pool, guarded)

    async def _heat_get(
        self, what: str, path: str, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """``GET path`` on Heat's API, its JSON body (a status >= 400 raised as ours)."""

        def get(conn: Any) -> dict[str, Any]:
            response = conn.orchestration.get(path, params=params, raise_exc=False)
            if response.status_code >= 400:
                raise _status_error(response.status_code, what)
            body: dict[str, Any] = response.json()
            return body

        return await self._call(what, get)

    async def _resource_attributes(self, stack_id: str, resource: str) -> dict[str, Any]:
        """``GET stacks/{stack_id}/resources/{resource}``: its ``attributes``."""
        what = f"Heat resource {resource} of stack {stack_id}"
        body = await self._heat_get(what, _resource_path(stack_id, resource))
        return (body.get("resource") or {}).get("attributes") or {}

    async def port_addresses(self, stack_id: str, cp_name: str) -> PortAddresses:
        """``GET stacks/{stack_id}/resources/{cp_name}``: the port's fixed and floating IPs.

        Arguments:
            stack_id: ``name/id`` of the stack holding the port.
            cp_name: the Heat resource name (the VNFD's CP name).

        Raises:
            OpenStackNotFound: no such stack or resource.
            OpenStackUnavailable: OpenStack did not answer (retriable).
            OpenStackError: anything else OpenStack refused.
        """
        attributes = await self._resource_attributes(stack_id, cp_name)
        fixed = tuple(
            str(ip["ip_address"])
            for ip in attributes.get("fixed_ips") or ()
            if isinstance(ip, dict) and ip.get("ip_address")
        )
        floating = attributes.get("floating_ip_address")
        return PortAddresses(fixed_ips=fixed, floating_ip=str(floating) if floating else None)

    async def server_stacks(self, stack: str) -> dict[str, str]:
        """``GET stacks/{stack}/resources?nested_depth=3``: each ``OS::Nova::Server`` under
        ``stack`` -> the ``name/id`` of the stack holding it (its ``stack`` link).

        Arguments:
            stack: the top stack's name (Heat resolves it) or ``name/id``.

        Raises:
            OpenStackNotFound: no such stack.
            OpenStackUnavailable: OpenStack did not answer (retriable).
            OpenStackError: anything else OpenStack refused.
        """
        what = f"Heat resources of stack {stack}"
        parts = stack.split("/")
        if any(part in ("", ".", "..") for part in parts) or len(parts) > 2:
            raise OpenStackRequestFailed(f"{what}: not a stack name or name/id")
        path = f"/stacks/{'/'.join(quote(p, safe='') for p in parts)}/resources"

        out: dict[str, str] = {}
        for res in (await self._heat_get(what, path, {"nested_depth": 3})).get("resources") or ():
            if not isinstance(res, dict) or res.get("resource_type") != "OS::Nova::Server":
                continue
            server = res.get("physical_resource_id")
            holder = _stack_link(res.get("links"))
            if server and holder:
                out[str(server)] = holder
        return out

    async def volume_devices(self, stack_id: str, volume_name: str) -> tuple[str, ...]:
        """The devices a Cinder volume resource is attached as (``attributes.attachments``,
        where Tacker's driver reads the storage server's device), in attachment order.

        Raises:
            OpenStackNotFound: no such stack or resource.
            OpenStackUnavailable: OpenStack did not answer (retriable).
            OpenStackError: anything else OpenStack refused.
        """
        attributes = await self._resource_attributes(stack_id, volume_name)
        attached = attributes.get("attachments_list") or attributes.get("attachments") or ()
        if isinstance(attached, str):  # older Heat: a JSON text
            try:
                attached = json.loads(attached)
            except ValueError:
                attached = ()
        return tuple(str(a["device"]) for a in attached if isinstance(a, dict) and a.get("device"))

    async def server_host(self, server_id: str) -> str | None:
        """Nova's ``OS-EXT-SRV-ATTR:host`` of ``server_id`` (None when hidden by policy).

        Raises:
            OpenStackNotFound: no such server.
            OpenStackUnavailable: OpenStack did not answer (retriable).
        """

        def get(conn: Any) -> str | None:
            host = conn.compute.get_server(server_id).compute_host
            return str(host) if host else None

        return await self._call(f"Nova server {server_id}", get)

    async def server_placement(self, server_id: str) -> ServerPlacement:
        """Host, availability zone and anti-affinity of ``server_id`` (Nova; the groups
        from ``server_groups`` of microversion 2.71, each group's ``policy`` or
        ``policies``).

        Raises:
            OpenStackNotFound: no such server.
            OpenStackUnavailable: OpenStack did not answer (retriable).
        """

        def get(conn: Any) -> ServerPlacement:
            server = conn.compute.get_server(server_id)
            anti = False
            for group_id in server.server_groups or ():
                group = conn.compute.get_server_group(group_id)
                policies = [
                    getattr(group, "policy", None),
                    *(getattr(group, "policies", None) or ()),
                ]
                anti = anti or "anti-affinity" in policies
            host, zone = server.compute_host, server.availability_zone
            return ServerPlacement(
                host=str(host) if host else None,
                availability_zone=str(zone) if zone else None,
                anti_affinity=anti,
            )

        return await self._call(f"Nova server {server_id}", get)


def _stack_link(links: Any) -> str | None:
    """``name/id`` from a resource's ``rel: stack`` link (``.../stacks/{name}/{id}``)."""
    for link in links or ():
        if isinstance(link, dict) and link.get("rel") == "stack":
            tail = str(link.get("href", "")).rstrip("/").split("/stacks/", 1)
            if len(tail) == 2 and tail[1].count("/") == 1:
                return unquote(tail[1])
    return None


def _connect(settings: OpenStackSettings) -> Any:
    from openstack import connection

    return connection.Connection(
        auth_url=settings.auth_url,
        username=settings.username,
        password=settings.password.get_secret_value(),
        project_name=settings.project_name,
        user_domain_name=settings.user_domain_name,
        project_domain_name=settings.project_domain_name,
        region_name=settings.region_name,
        interface=settings.interface,
        api_timeout=settings.request_timeout,
    )
