"""A simulated OpenStack: the Keystone, Heat, Glance and Nova calls Tacker 16.0.0 makes.

One aiohttp application on one port answers, under path prefixes that its Keystone
catalog names (``identity``, ``orchestration``, ``image``, ``compute``,
``key-manager``; each with public, internal and admin endpoints in ``RegionOne``):

* Keystone v3 (``/identity``): version discovery, password tokens (``X-Subject-Token``
  and a catalog pointing at this server), ``GET /v3/regions`` (with a token); a wrong
  password is 401, and so is any other call without a token the simulator issued.
* Heat v1 (``/heat-api/v1/{project_id}``): stack create / show / update (PATCH keeps
  what is not sent, PUT replaces) / delete; a stack named by its name or id alone is
  answered, as Heat does, with a 302 to ``{name}/{id}`` (heatclient needs the
  Location), a deleted one by its id only (DELETE_COMPLETE, not 404); the stack list
  with the filters ``name``, ``id``, ``status`` and ``owner_id`` and ``show_nested``;
  resources (``nested_depth``, ``with_detail``), resource show
  (``attributes.fixed_ips``, ``floating_ip_address``), ``mark_unhealthy``, resource
  ``metadata`` (empty: no cooldown), ``signal`` (a ScalingPolicy resizes its group),
  events of a stack and of a resource (``limit``, ``sort_dir``, newest first),
  template, files. The engine in :mod:`tests.testbed.openstack_sim.heat` creates the resources.
* Glance v2 (``/image``): image list (``tag``, ``name``), show, create, upload, delete.
* Nova v2.1 (``/compute``): ``os-availability-zone/detail``, ``servers/{id}`` with
  ``OS-EXT-SRV-ATTR:host`` and ``server_groups``, servers list, ``os-server-groups``.
* Barbican v1 (``/key-manager``): the secrets Tacker keeps its Kubernetes VIMs' Fernet
  keys in (:mod:`tests.testbed.openstack_sim.barbican`).
* Control (``/_sim``): ``faults`` (POST one, GET all, DELETE all), ``state`` (servers,
  ports, stacks), ``calls`` (every call seen, oldest first), ``health``.

What Tacker asks of it, read from Tacker 16.0.0 (each call first gets a token):

* v2 (``tacker/sol_refactored/infra_drivers/openstack``): ``GET stacks/vnf-{inst}``
  (404 before a create), ``POST stacks`` with the nested templates as ``files`` and
  the ``nfv`` json parameter, ``GET stacks/{name}/{id}`` until ``*_COMPLETE``,
  ``GET .../resources?nested_depth=2``, ``PATCH`` for SCALE and HEAL after
  ``mark_unhealthy``, ``DELETE`` and ``GET`` by name until 404; Glance by tag.
* v1 (``tacker/vnflcm``, ``tacker/vnfm/infra_drivers/openstack``, with BaseHOT and
  LCM operation user data): registering an OpenStack VIM reads ``GET /v3`` and
  ``/v3/regions``; INSTANTIATE lists ``stacks?name=vnflcm_{inst}``, creates
  ``vnflcm_{inst}`` and reads it by id (the 302), each AutoScalingGroup and its
  members, and ``stacks?owner_id={id}&show_nested=True`` for the nested stacks;
  SCALE reads the group's ``metadata`` (cooldown) and the policy's newest event,
  ``POST .../resources/{aspect}_scale_out|in/signal``, then polls the group's members
  and the policy's events (every ``[openstack_vim] stack_retry_wait``); HEAL of a VNFC
  marks its server unhealthy and updates the stack, HEAL of the VNF deletes and
  creates it again; TERMINATE deletes it and waits for DELETE_COMPLETE by id. Glance
  only for VDUs with software image artifacts (the v1 package has none).

Faults are injected per call: a fault matches a service, a method and a path regex and
either answers with a status code (after an optional delay) or, with ``stack_failure``,
lets a stack create/update be accepted and end in ``*_FAILED`` with that reason (what a
real Heat does when a server cannot be built).

Every call is logged (``/_sim/calls``: method, path, status, whether a fault answered).

Left out: Neutron, Cinder and Placement APIs, Barbican beyond secrets; token expiry
and revocation; policy and roles; pagination; microversion negotiation (any
``OpenStack-API-Version`` is answered as 2.79); cooldowns and the alarms that signal
policies; real asynchrony (stack operations, signals included, are complete when the call returns).
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import re
import secrets
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from .barbican import PREFIX as KEY_MANAGER
from .barbican import KeyManager
from .heat import AddressPool, HeatEngine, HeatError, Stack, parse_template
from .volumes import LoopDevices, VolumeRegistry

__all__ = ["Fault", "OpenStackSim", "SimConfig", "vim_connection_info"]

# A matched ``stack_failure`` fault, for the handler of the same request (same task).
_STACK_FAILURE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "stack_failure", default=None
)
_STACK_SUBPATHS = {"resources", "template", "files", "events", "outputs", "environment", "actions"}


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """What the simulated cloud looks like.

    ``server_pool`` gives the addresses of ports that servers use (a VNFC's "VM" can be
    a real SSH test host); ``vip_pool`` those of ports no server uses (a cluster VIP).
    """

    username: str = "nfv_user"
    password: str = "devstack"
    project_name: str = "nfv"
    project_id: str = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
    user_id: str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    domain: str = "Default"
    region: str = "RegionOne"
    server_pool: str = "10.77.0.11-10.77.0.40"
    vip_pool: str = "10.77.0.200-10.77.0.219"
    floating_pool: str = "192.0.2.100-192.0.2.149"
    compute_hosts: tuple[str, ...] = ("compute-0", "compute-1", "compute-2")
    zone: str = "nova"
    # Back each Cinder volume with a loop device (root only; see volumes.py).
    loop_volumes: bool = False

    def password_auth(self, auth_url: str) -> dict[str, str]:
        """How a client logs in with this cloud's password: openstacksdk's ``Connection``
        keywords, and ``serve``'s ``openstack`` settings section."""
        return {
            "auth_url": auth_url,
            "username": self.username,
            "password": self.password,
            "project_name": self.project_name,
            "user_domain_name": self.domain,
            "project_domain_name": self.domain,
            "region_name": self.region,
        }


@dataclass(kw_only=True)
class Fault:
    """One injected fault. ``times`` = 0 means every matching call until cleared."""

    service: str = "*"  # identity | orchestration | image | compute | key-manager | *
    method: str = "*"
    path: str = ".*"  # regex searched in the path after the service prefix
    status: int | None = 500
    delay: float = 0.0
    times: int = 1
    body: dict[str, Any] | None = None
    stack_failure: str | None = None  # accept, then leave the stack *_FAILED
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    hits: int = 0

    def matches(self, service: str, method: str, path: str) -> bool:
        return (
            self.service in ("*", service)
            and self.method in ("*", method)
            and re.search(self.path, path) is not None
        )


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


def _one_version(version_id: str, href: str) -> web.Response:
    """A service's version document (300 Multiple Choices) naming its one CURRENT version."""
    doc = {"id": version_id, "status": "CURRENT", "links": [{"rel": "self", "href": href}]}
    return _json({"versions": [doc]}, 300)


def _heat_error(status: int, title: str, message: str) -> web.Response:
    return _json(
        {
            "code": status,
            "title": title,
            "explanation": message,
            "error": {"message": message, "type": title},
        },
        status,
    )


class OpenStackSim:
    """The simulator as a component: ``async with OpenStackSim(cfg) as sim: sim.url``.

    Arguments:
        config: the cloud's shape (credentials, address pools, compute hosts).
        host: where to listen; loopback only.
        port: 0 picks a free port.
    """

    def __init__(
        self, config: SimConfig | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.config = config or SimConfig()
        self._host, self._port = host, port
        self.engine = HeatEngine(
            server_pool=AddressPool.parse("servers", self.config.server_pool),
            vip_pool=AddressPool.parse("vips", self.config.vip_pool),
            floating_pool=AddressPool.parse("floating", self.config.floating_pool),
            compute_hosts=list(self.config.compute_hosts),
            zone=self.config.zone,
            volumes=VolumeRegistry(LoopDevices() if self.config.loop_volumes else None),
        )
        self.faults: list[Fault] = []
        self.calls: list[dict[str, Any]] = []
        self.images: dict[str, dict[str, Any]] = {}
        self.key_manager = KeyManager(lambda: self.url)
        self._tokens: set[str] = set()
        self._runner: web.AppRunner | None = None
        self._url = ""
        self._lock = asyncio.Lock()

    # ---- lifecycle --------------------------------------------------------------------

    @property
    def url(self) -> str:
        if not self._url:
            raise RuntimeError("OpenStackSim is not started")
        return self._url

    @property
    def auth_url(self) -> str:
        return f"{self.url}/identity/v3"

    def openstack_settings(self) -> dict[str, str]:
        """The ``openstack`` settings section (and openstacksdk login) that reach it."""
        return self.config.password_auth(self.auth_url)

    async def start(self) -> None:
        """Listen; the URL is in :attr:`url` afterwards. Raises RuntimeError if started."""
        if self._runner is not None:
            raise RuntimeError("OpenStackSim already started")
        self._runner = web.AppRunner(self.make_app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        port = self._runner.addresses[0][1]
        self._url = f"http://{self._host}:{port}"

    async def stop(self) -> None:
        """Stop listening; idempotent."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        self.engine.volumes.close()

    async def __aenter__(self) -> OpenStackSim:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def vim_connection_info(self, key: str = "vim1") -> dict[str, Any]:
        """The ``vimConnectionInfo`` map that points Tacker at this cloud."""
        return vim_connection_info(self.auth_url, self.config, key)

    # ---- app --------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        r = app.router
        # Keystone
        r.add_get("/identity", self._identity_versions)
        r.add_get("/identity/", self._identity_versions)
        r.add_get("/identity/v3", self._identity_v3)
        r.add_get("/identity/v3/", self._identity_v3)
        r.add_post("/identity/v3/auth/tokens", self._issue_token)
        r.add_get("/identity/v3/auth/tokens", self._check_token)
        r.add_get("/identity/v3/regions", self._regions)
        # Heat
        r.add_get("/heat-api", self._heat_versions)
        r.add_get("/heat-api/", self._heat_versions)
        r.add_route("*", "/heat-api/v1/{project}/stacks", self._stacks)
        r.add_route("*", "/heat-api/v1/{project}/stacks/{tail:.+}", self._stack_tail)
        # Glance
        r.add_get("/image", self._image_versions)
        r.add_get("/image/", self._image_versions)
        r.add_get("/image/v2/images", self._images_list)
        r.add_post("/image/v2/images", self._image_create)
        r.add_get("/image/v2/images/{id}", self._image_show)
        r.add_put("/image/v2/images/{id}/file", self._image_upload)
        r.add_delete("/image/v2/images/{id}", self._image_delete)
        # Nova
        r.add_get("/compute", self._compute_versions)
        r.add_get("/compute/", self._compute_versions)
        r.add_get("/compute/v2.1", self._compute_version)
        r.add_get("/compute/v2.1/", self._compute_version)
        r.add_get("/compute/v2.1/os-availability-zone/detail", self._zones)
        r.add_get("/compute/v2.1/os-availability-zone", self._zones)
        r.add_get("/compute/v2.1/servers", self._servers_list)
        r.add_get("/compute/v2.1/servers/detail", self._servers_list)
        r.add_get("/compute/v2.1/servers/{id}", self._server_show)
        r.add_get("/compute/v2.1/os-server-groups", self._server_groups)
        r.add_get("/compute/v2.1/os-server-groups/{id}", self._server_group_show)
        # Barbican
        self.key_manager.add_routes(r)
        # Control
        r.add_get("/_sim/health", self._health)
        r.add_get("/_sim/faults", self._faults_list)
        r.add_post("/_sim/faults", self._faults_add)
        r.add_delete("/_sim/faults", self._faults_clear)
        r.add_get("/_sim/state", self._state)
        r.add_get("/_sim/calls", self._calls)
        r.add_delete("/_sim/calls", self._calls_clear)
        return app

    @staticmethod
    def _service_of(path: str) -> tuple[str, str]:
        for prefix, service in (
            ("/identity", "identity"),
            ("/heat-api", "orchestration"),
            ("/image", "image"),
            ("/compute", "compute"),
            (KEY_MANAGER, "key-manager"),
        ):
            if path == prefix or path.startswith(prefix + "/"):
                return service, path[len(prefix) :]
        return "control", path

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        service, rest = self._service_of(request.path)
        _STACK_FAILURE.set(None)
        if service == "control":
            return await handler(request)
        call: dict[str, Any] = {
            "at": _now(),
            "service": service,
            "method": request.method,
            "path": request.path,
            "query": request.query_string,
            "status": None,
            "injected": False,
        }
        self.calls.append(call)
        response = await self._answer(request, handler, service, rest, call)
        call["status"] = response.status
        return response

    async def _answer(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
        service: str,
        rest: str,
        call: dict[str, Any],
    ) -> web.StreamResponse:
        for fault in list(self.faults):
            if not fault.matches(service, request.method, rest):
                continue
            fault.hits += 1
            if fault.times and fault.hits >= fault.times:
                self.faults.remove(fault)
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.stack_failure is not None:
                _STACK_FAILURE.set(fault.stack_failure)
                call["injected"] = True
                break
            if fault.status is not None:
                body = fault.body or {
                    "error": {"message": f"injected fault {fault.id}", "code": fault.status}
                }
                call["injected"] = True
                return _json(body, fault.status)
            break
        if (
            service != "identity"
            and not request.path.rstrip("/").endswith(
                ("/identity", "/heat-api", "/image", "/compute", "/v2.1", "/v3", KEY_MANAGER)
            )
            and request.headers.get("X-Auth-Token") not in self._tokens
        ):
            return _json(
                {
                    "error": {
                        "code": 401,
                        "message": "The request you have made requires authentication.",
                        "title": "Unauthorized",
                    }
                },
                401,
            )
        async with self._lock:  # the engine is not re-entrant; calls are short
            return await handler(request)

    # ---- Keystone ---------------------------------------------------------------------

    def _v3_doc(self) -> dict[str, Any]:
        return {
            "id": "v3.14",
            "status": "stable",
            "updated": "2020-04-07T00:00:00Z",
            "links": [{"rel": "self", "href": f"{self.url}/identity/v3/"}],
            "media-types": [
                {"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}
            ],
        }

    async def _identity_versions(self, request: web.Request) -> web.Response:
        return _json({"versions": {"values": [self._v3_doc()]}}, 300)

    async def _identity_v3(self, request: web.Request) -> web.Response:
        return _json({"version": self._v3_doc()})

    def _catalog(self) -> list[dict[str, Any]]:
        c = self.config
        urls = {
            "identity": ("keystone", f"{self.url}/identity"),
            "orchestration": ("heat", f"{self.url}/heat-api/v1/{c.project_id}"),
            "image": ("glance", f"{self.url}/image"),
            "compute": ("nova", f"{self.url}/compute/v2.1"),
            "key-manager": ("barbican", self.key_manager.endpoint),
        }
        return [
            {
                "type": stype,
                "name": name,
                "id": uuid.uuid5(uuid.NAMESPACE_URL, stype).hex,
                "endpoints": [
                    {
                        "id": uuid.uuid5(uuid.NAMESPACE_URL, stype + iface).hex,
                        "interface": iface,
                        "region": c.region,
                        "region_id": c.region,
                        "url": url,
                    }
                    for iface in ("public", "internal", "admin")
                ],
            }
            for stype, (name, url) in urls.items()
        ]

    def _token_body(self) -> dict[str, Any]:
        c = self.config
        now = dt.datetime.now(dt.UTC)
        domain = {"id": c.domain.lower(), "name": c.domain}
        return {
            "token": {
                "methods": ["password"],
                "user": {
                    "id": c.user_id,
                    "name": c.username,
                    "domain": domain,
                    "password_expires_at": None,
                },
                "project": {"id": c.project_id, "name": c.project_name, "domain": domain},
                "roles": [
                    {"id": uuid.uuid5(uuid.NAMESPACE_DNS, "admin").hex, "name": "admin"},
                    {"id": uuid.uuid5(uuid.NAMESPACE_DNS, "member").hex, "name": "member"},
                ],
                "issued_at": now.strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
                "expires_at": (now + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
                "is_domain": False,
                "catalog": self._catalog(),
            }
        }

    async def _issue_token(self, request: web.Request) -> web.Response:
        c = self.config
        try:
            body = await request.json()
            ident = body["auth"]["identity"]
            user = ident["password"]["user"]
            ok = (
                "password" in ident["methods"]
                and user.get("name") in (c.username, None)
                and user.get("id") in (c.user_id, None)
                and user.get("password") == c.password
            )
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            return _json(
                {
                    "error": {
                        "code": 401,
                        "title": "Unauthorized",
                        "message": "The request you have made requires authentication.",
                    }
                },
                401,
            )
        scope = (body["auth"].get("scope") or {}).get("project") or {}
        wrong_project = scope.get("name") not in (c.project_name, None)
        if scope and wrong_project and scope.get("id") != c.project_id:
            return _json(
                {
                    "error": {
                        "code": 401,
                        "title": "Unauthorized",
                        "message": "not authorized for that project",
                    }
                },
                401,
            )
        token = "gAAAAA" + secrets.token_urlsafe(48)
        self._tokens.add(token)
        return _json(self._token_body(), 201, {"X-Subject-Token": token})

    async def _regions(self, request: web.Request) -> web.Response:
        # What Tacker reads when an OpenStack VIM is registered (placement_attr.regions).
        if request.headers.get("X-Auth-Token") not in self._tokens:
            return _json({"error": {"code": 401, "message": "authentication required"}}, 401)
        region = self.config.region
        return _json(
            {
                "regions": [
                    {
                        "id": region,
                        "description": "",
                        "parent_region_id": None,
                        "links": {"self": f"{self.url}/identity/v3/regions/{region}"},
                    }
                ],
                "links": {"self": f"{self.url}/identity/v3/regions", "next": None},
            }
        )

    async def _check_token(self, request: web.Request) -> web.Response:
        if request.headers.get("X-Subject-Token") not in self._tokens:
            return _json({"error": {"code": 404, "message": "token not found"}}, 404)
        return _json(self._token_body())

    # ---- Heat -------------------------------------------------------------------------

    async def _heat_versions(self, request: web.Request) -> web.Response:
        return _one_version("v1.0", f"{self.url}/heat-api/v1/")

    def _stack_url(self, stack: Stack) -> str:
        return f"{self.url}/heat-api/v1/{self.config.project_id}/stacks/{stack.name}/{stack.id}"

    def _stack_body(self, stack: Stack) -> dict[str, Any]:
        parent = stack.parent[0].id if stack.parent else None
        return {
            "id": stack.id,
            "stack_name": stack.name,
            "description": stack.template.get("description", ""),
            "stack_status": stack.status,
            "stack_status_reason": stack.status_reason,
            "creation_time": stack.creation_time,
            "updated_time": stack.updated_time,
            "deletion_time": None,
            "parent": parent,
            "timeout_mins": stack.timeout_mins,
            "disable_rollback": stack.disable_rollback,
            "parameters": {**stack.param_values(), "OS::project_id": self.config.project_id},
            "outputs": [],
            "capabilities": [],
            "notification_topics": [],
            "tags": None,
            "stack_owner": self.config.username,
            "stack_user_project_id": self.config.project_id,
            "template_description": stack.template.get("description", ""),
            "links": [{"href": self._stack_url(stack), "rel": "self"}],
        }

    def _resource_body(self, stack: Stack, name: str, *, detail: bool) -> dict[str, Any]:
        res = stack.resources[name]
        links = [
            {"href": f"{self._stack_url(stack)}/resources/{name}", "rel": "self"},
            {"href": self._stack_url(stack), "rel": "stack"},
        ]
        if res.nested is not None:
            links.append({"href": self._stack_url(res.nested), "rel": "nested"})
        required_by = [n for n, r in stack.resources.items() if name in r.depends()]
        body: dict[str, Any] = {
            "resource_name": name,
            "logical_resource_id": name,
            "physical_resource_id": res.physical_id,
            "resource_type": res.type,
            "resource_status": res.status,
            "resource_status_reason": res.status_reason,
            "creation_time": res.creation_time,
            "updated_time": res.updated_time or res.creation_time,
            "required_by": required_by,
            "links": links,
        }
        if stack.parent is not None:
            body["parent_resource"] = stack.parent[1]
        if detail:
            body["attributes"] = res.attributes
            body["description"] = ""
            body["metadata"] = {}
        return body

    async def _stacks(self, request: web.Request) -> web.Response:
        if request.method == "GET":
            return _json({"stacks": [self._stack_body(s) for s in self._listed(request.query)]})
        if request.method != "POST":
            raise web.HTTPMethodNotAllowed(request.method, ["GET", "POST"])
        body = await request.json()
        name = body.get("stack_name")
        if not name or "template" not in body:
            return _heat_error(400, "Bad Request", "stack_name and template are required")
        if any(s.name == name for s in self.engine.top_level()):
            return _heat_error(409, "Conflict", f"The Stack ({name}) already exists.")
        failure = _STACK_FAILURE.get()
        try:
            stack = self.engine.create_stack(
                name,
                body["template"] if failure is None else {"resources": {}},
                body.get("files"),
                body.get("parameters"),
                timeout_mins=body.get("timeout_mins"),
                disable_rollback=bool(body.get("disable_rollback", True)),
            )
        except HeatError as exc:
            return _heat_error(400, "Bad Request", str(exc))
        if failure is not None:
            stack.template = _parse_or_keep(body["template"])
            stack.status, stack.status_reason = "CREATE_FAILED", failure
        return _json(
            {"stack": {"id": stack.id, "links": [{"href": self._stack_url(stack), "rel": "self"}]}},
            201,
        )

    def _listed(self, query: Any) -> list[Stack]:
        """The stacks ``GET stacks`` lists: top-level ones (every one with ``show_nested``,
        what Tacker's v1 asks with ``owner_id``), filtered by ``name``, ``id``, ``status``
        and ``owner_id`` (the parent stack's id)."""
        nested = str(query.get("show_nested", "")).lower() in ("1", "true", "yes")
        stacks = list(self.engine.stacks.values()) if nested else self.engine.top_level()
        for key, value in query.items():
            if key == "name":
                stacks = [s for s in stacks if s.name == value]
            elif key == "id":
                stacks = [s for s in stacks if s.id == value]
            elif key == "status":
                stacks = [s for s in stacks if s.status.endswith(value)]
            elif key == "owner_id":
                stacks = [s for s in stacks if s.parent is not None and s.parent[0].id == value]
        return stacks

    def _split_tail(self, tail: str) -> tuple[str, list[str]]:
        parts = tail.split("/")
        if len(parts) >= 2 and parts[1] not in _STACK_SUBPATHS:
            return f"{parts[0]}/{parts[1]}", parts[2:]
        return parts[0], parts[1:]

    async def _stack_tail(self, request: web.Request) -> web.Response:
        ident, rest = self._split_tail(request.match_info["tail"])
        stack = self.engine.find(ident)
        if stack is None:
            return _heat_error(404, "Not Found", f"The Stack ({ident}) could not be found.")
        m = request.method
        if m == "GET" and "/" not in ident:
            # Heat answers a stack named by its name or id alone with a redirect to
            # {name}/{id} (heatclient resolves every stack id so, and needs the Location).
            location = "/".join([self._stack_url(stack), *rest])
            if request.query_string:
                location += f"?{request.query_string}"
            return web.Response(status=302, headers={"Location": location})
        if not rest:
            if m == "GET":
                return _json({"stack": self._stack_body(stack)})
            if stack.status == "DELETE_COMPLETE":
                return _heat_error(404, "Not Found", f"The Stack ({ident}) could not be found.")
            if m in ("PATCH", "PUT"):
                return await self._update(request, stack, existing=(m == "PATCH"))
            if m == "DELETE":
                self.engine.delete_stack(stack)
                return web.Response(status=204)
        elif rest == ["template"] and m == "GET":
            return _json(stack.template)
        elif rest == ["files"] and m == "GET":
            return _json(stack.files)
        elif rest == ["environment"] and m == "GET":
            return _json(
                {"parameters": stack.params, "resource_registry": {}, "parameter_defaults": {}}
            )
        elif rest == ["outputs"] and m == "GET":
            return _json({"outputs": []})
        elif rest and rest[0] == "resources":
            return await self._resources(request, stack, rest[1:])
        elif rest == ["events"] and m == "GET":
            return self._events(request, stack, list(stack.resources.values()))
        return _heat_error(404, "Not Found", f"no route for {m} {request.path}")

    def _events(self, request: web.Request, stack: Stack, resources: list[Any]) -> web.Response:
        """Events of ``resources``, by ``event_time`` (``sort_dir``, newest first by default)
        and at most ``limit``, as heatclient's ``events.list`` reads them."""
        events = sorted(
            (e for r in resources for e in r.events),
            key=lambda e: (e["event_time"], e["seq"]),
            reverse=request.query.get("sort_dir", "desc") != "asc",
        )
        limit = request.query.get("limit")
        if limit and limit.isdigit():
            events = events[: int(limit)]
        url = self._stack_url(stack)
        return _json(
            {
                "events": [
                    {
                        **{k: v for k, v in e.items() if k != "seq"},
                        "links": [
                            {
                                "href": f"{url}/resources/{e['resource_name']}/events/{e['id']}",
                                "rel": "self",
                            },
                            {"href": url, "rel": "stack"},
                        ],
                    }
                    for e in events
                ]
            }
        )

    async def _update(self, request: web.Request, stack: Stack, *, existing: bool) -> web.Response:
        body = await request.json()
        failure = _STACK_FAILURE.get()
        if failure is not None:
            stack.updated_time = self.engine._stamp()
            stack.status, stack.status_reason = "UPDATE_FAILED", failure
            return web.Response(status=202)
        try:
            self.engine.update_stack(
                stack,
                template=body.get("template"),
                files=body.get("files"),
                params=body.get("parameters"),
                existing=existing,
            )
        except HeatError as exc:
            return _heat_error(400, "Bad Request", str(exc))
        return web.Response(status=202)

    def _walk(self, stack: Stack, depth: int) -> list[tuple[Stack, str]]:
        # Breadth first, top stack first: Tacker looks parents up by name in this list.
        out: list[tuple[Stack, str]] = []
        level = [stack]
        for d in range(depth + 1):
            nxt: list[Stack] = []
            for s in level:
                for name, res in s.resources.items():
                    out.append((s, name))
                    if res.nested is not None and d < depth:
                        nxt.append(res.nested)
            level = nxt
        return out

    async def _resources(self, request: web.Request, stack: Stack, rest: list[str]) -> web.Response:
        m = request.method
        if not rest and m == "GET":
            depth = int(request.query.get("nested_depth", "0") or 0)
            detail = request.query.get("with_detail", "").lower() in ("1", "true", "yes")
            return _json(
                {
                    "resources": [
                        self._resource_body(s, n, detail=detail)
                        for s, n in self._walk(stack, depth)
                    ]
                }
            )
        if len(rest) == 1:
            name = rest[0]
            if name not in stack.resources:
                return _heat_error(404, "Not Found", f"The Resource ({name}) could not be found.")
            if m == "GET":
                return _json({"resource": self._resource_body(stack, name, detail=True)})
            if m == "PATCH":
                body = await request.json()
                self.engine.mark_unhealthy(
                    stack,
                    name,
                    bool(body.get("mark_unhealthy")),
                    str(body.get("resource_status_reason", "")),
                )
                return _json({}, 200)
        if len(rest) == 2 and rest[0] not in stack.resources:
            return _heat_error(404, "Not Found", f"The Resource ({rest[0]}) could not be found.")
        if len(rest) == 2 and rest[1] == "events" and m == "GET":
            return self._events(request, stack, [stack.resources[rest[0]]])
        if len(rest) == 2 and rest[1] == "metadata" and m == "GET":
            # No cooldown: Tacker's v1 SCALE reads it (cooldown_end) before signalling.
            return _json({"metadata": {}})
        if len(rest) == 2 and rest[1] == "signal" and m == "POST":
            try:
                self.engine.signal(stack, rest[0])
            except HeatError as exc:
                return _heat_error(400, "Bad Request", str(exc))
            return web.Response(status=200)
        return _heat_error(404, "Not Found", f"no route for {m} {request.path}")

    # ---- Glance -----------------------------------------------------------------------

    async def _image_versions(self, request: web.Request) -> web.Response:
        return _one_version("v2.16", f"{self.url}/image/v2/")

    async def _images_list(self, request: web.Request) -> web.Response:
        tags = request.query.getall("tag", [])
        name = request.query.get("name")
        images = [
            i
            for i in self.images.values()
            if all(t in i["tags"] for t in tags) and (name is None or i["name"] == name)
        ]
        return _json({"images": images, "first": "/v2/images", "schema": "/v2/schemas/images"})

    async def _image_create(self, request: web.Request) -> web.Response:
        body = await request.json()
        iid = body.get("id") or str(uuid.uuid4())
        image = {
            "id": iid,
            "name": body.get("name"),
            "status": "queued",
            "tags": list(body.get("tags") or []),
            "visibility": body.get("visibility", "shared"),
            "container_format": body.get("container_format"),
            "disk_format": body.get("disk_format"),
            "min_disk": body.get("min_disk", 0),
            "min_ram": body.get("min_ram", 0),
            "size": None,
            "created_at": _now(),
            "updated_at": _now(),
            "self": f"/v2/images/{iid}",
            "file": f"/v2/images/{iid}/file",
            "schema": "/v2/schemas/image",
            "owner": self.config.project_id,
            "protected": False,
        }
        self.images[iid] = image
        return _json(image, 201)

    async def _image_show(self, request: web.Request) -> web.Response:
        image = self.images.get(request.match_info["id"])
        return _json(image) if image else _json({"message": "not found"}, 404)

    async def _image_upload(self, request: web.Request) -> web.Response:
        image = self.images.get(request.match_info["id"])
        if image is None:
            return _json({"message": "not found"}, 404)
        size = 0
        async for chunk in request.content.iter_chunked(1 << 16):
            size += len(chunk)
        image.update(status="active", size=size, updated_at=_now())
        return web.Response(status=204)

    async def _image_delete(self, request: web.Request) -> web.Response:
        if self.images.pop(request.match_info["id"], None) is None:
            return _json({"message": "not found"}, 404)
        return web.Response(status=204)

    # ---- Nova -------------------------------------------------------------------------

    def _compute_doc(self) -> dict[str, Any]:
        return {
            "id": "v2.1",
            "status": "CURRENT",
            "version": "2.79",
            "min_version": "2.1",
            "updated": "2013-07-23T11:33:21Z",
            "links": [{"rel": "self", "href": f"{self.url}/compute/v2.1/"}],
        }

    async def _compute_versions(self, request: web.Request) -> web.Response:
        return _json({"versions": [self._compute_doc()]}, 300)

    async def _compute_version(self, request: web.Request) -> web.Response:
        return _json({"version": self._compute_doc()})

    async def _zones(self, request: web.Request) -> web.Response:
        hosts = {
            h: {"nova-compute": {"available": True, "active": True, "updated_at": _now()}}
            for h in self.config.compute_hosts
        }
        return _json(
            {
                "availabilityZoneInfo": [
                    {
                        "zoneName": self.config.zone,
                        "zoneState": {"available": True},
                        "hosts": hosts,
                    },
                    {
                        "zoneName": "internal",
                        "zoneState": {"available": True},
                        "hosts": {
                            "controller": {"nova-scheduler": {"available": True, "active": True}}
                        },
                    },
                ]
            }
        )

    def _server_body(self, server: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in server.items() if k != "port_ids"}
        body.update(
            tenant_id=self.config.project_id,
            user_id=self.config.user_id,
            links=[{"rel": "self", "href": f"{self.url}/compute/v2.1/servers/{server['id']}"}],
        )
        return body

    async def _servers_list(self, request: web.Request) -> web.Response:
        return _json({"servers": [self._server_body(s) for s in self.engine.servers.values()]})

    async def _server_show(self, request: web.Request) -> web.Response:
        server = self.engine.servers.get(request.match_info["id"])
        if server is None:
            return _json(
                {
                    "itemNotFound": {
                        "code": 404,
                        "message": f"Instance {request.match_info['id']} could not be found.",
                    }
                },
                404,
            )
        return _json({"server": self._server_body(server)})

    async def _server_groups(self, request: web.Request) -> web.Response:
        return _json({"server_groups": list(self.engine.server_groups.values())})

    async def _server_group_show(self, request: web.Request) -> web.Response:
        group = self.engine.server_groups.get(request.match_info["id"])
        if group is None:
            return _json({"itemNotFound": {"code": 404, "message": "not found"}}, 404)
        return _json({"server_group": group})

    # ---- control ----------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return _json({"ok": True, "auth_url": self.auth_url})

    async def _faults_list(self, request: web.Request) -> web.Response:
        return _json([asdict(f) for f in self.faults])

    async def _faults_add(self, request: web.Request) -> web.Response:
        body = await request.json()
        try:
            fault = Fault(**{k: v for k, v in body.items() if k not in ("id", "hits")})
            re.compile(fault.path)
        except (TypeError, re.error) as exc:
            return _json({"error": str(exc)}, 400)
        self.faults.append(fault)
        return _json(asdict(fault), 201)

    async def _faults_clear(self, request: web.Request) -> web.Response:
        self.faults.clear()
        return web.Response(status=204)

    async def _state(self, request: web.Request) -> web.Response:
        e = self.engine
        return _json(
            {
                "server_pool": e.server_pool.addresses,
                "vip_pool": e.vip_pool.addresses,
                "servers": [self._server_body(s) for s in e.servers.values()],
                "ports": list(e.ports.values()),
                "server_groups": list(e.server_groups.values()),
                "stacks": [
                    {
                        "id": s.id,
                        "name": s.name,
                        "status": s.status,
                        "status_reason": s.status_reason,
                        "parent": s.parent[0].id if s.parent else None,
                    }
                    for s in e.stacks.values()
                ],
                "images": list(self.images.values()),
                "secrets": self.key_manager.state(),
            }
        )

    async def _calls(self, request: web.Request) -> web.Response:
        return _json(self.calls)

    async def _calls_clear(self, request: web.Request) -> web.Response:
        self.calls.clear()
        return web.Response(status=204)


def vim_connection_info(
    auth_url: str, config: SimConfig | None = None, key: str = "vim1"
) -> dict[str, Any]:
    """The ``vimConnectionInfo`` map (v2 form) that points Tacker at a simulator."""
    c = config or SimConfig()
    return {
        key: {
            "vimId": str(uuid.uuid5(uuid.NAMESPACE_URL, auth_url)),
            "vimType": "ETSINFV.OPENSTACK_KEYSTONE.V_3",
            "interfaceInfo": {"endpoint": auth_url},
            "accessInfo": {
                "username": c.username,
                "password": c.password,
                "region": c.region,
                "project": c.project_name,
                "projectDomain": c.domain,
                "userDomain": c.domain,
            },
        }
    }


def _parse_or_keep(template: Any) -> dict[str, Any]:
    try:
        return parse_template(template)
    except (HeatError, ValueError):
        return {}
