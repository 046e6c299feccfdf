"""A cluster VNF served over loopback HTTP, for a ``serve`` in a container to reach.

The in-memory fakes of :mod:`tests.testbed.cluster_vnf` are Python objects; a ``serve``
in a container (``--network host``) needs real endpoints. Here the VNFCs' stacks,
servers and ports live in the simulated OpenStack (Keystone, Heat, Nova; its server
pool is the test hosts' addresses), and :class:`HttpTacker` answers what the
INSTANTIATE handler asks of Tacker v2 (``auth_type: noauth``) from a
:class:`FakeTacker`'s instances and op-occs: ``GET`` of an instance and an op-occ,
the op-occ list, and the write-back's merge ``PATCH`` (202 with the MODIFY_INFO
op-occ's ``Location``). Every request is recorded; anything else is a 404.
"""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp
from aiohttp import web

from tests.loopback import listen
from tests.testbed.cluster_vnf import LIST_EXCLUDED, MASTER_CP, WORKER_CP, FakeTacker, cluster_vnf
from tests.testbed.openstack_sim import OpenStackSim

__all__ = ["HttpTacker", "sim_cluster_vnf"]

V2 = "/vnflcm/v2"

_VNFC_HOT = """
heat_template_version: 2016-10-14
resources:
  server:
    type: OS::Nova::Server
    properties:
      flavor: m1.small
      image: ubuntu
      networks: [{port: {get_resource: %(cp)s}}]
  %(cp)s:
    type: OS::Neutron::Port
    properties: {network: net0}
"""


class HttpTacker:
    def __init__(self, fake: FakeTacker) -> None:
        self.fake = fake
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.seen: list[tuple[str, str]] = []
        self.url = ""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)

    async def start(self) -> None:
        self.url = await listen(self._runner)

    async def close(self) -> None:
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.path))
        parts = request.path.removeprefix(V2 + "/").split("/")
        if not request.path.startswith(V2 + "/") or len(parts) > 2:
            return web.json_response({"status": 404, "detail": "not served"}, status=404)
        kind, ident = parts[0], parts[1] if len(parts) == 2 else None
        if kind == "vnf_instances" and ident in self.fake.instances:
            if request.method == "GET":
                return web.json_response(self.fake.instances[ident])
            if request.method == "PATCH":
                return await self._patch(request, ident)
        if kind == "vnf_lcm_op_occs" and request.method == "GET":
            if ident is None:
                wanted = dict(
                    p.strip("()").split(",")[1:]
                    for p in request.query.get("filter", "").split(";")
                    if p
                )
                return web.json_response(
                    [
                        {k: v for k, v in o.items() if k not in LIST_EXCLUDED}
                        for o in self.fake.op_occs.values()
                        if all(o.get(k) == v for k, v in wanted.items())
                    ]
                )
            if ident in self.fake.op_occs:
                return web.json_response(self.fake.op_occs[ident])
        return web.json_response({"status": 404, "detail": "not found"}, status=404)

    async def _patch(self, request: web.Request, ident: str) -> web.Response:
        body = await request.json()
        self.patches.append((ident, body))
        info = self.fake.instances[ident].setdefault("vimConnectionInfo", {})
        for key, entry in (body.get("vimConnectionInfo") or {}).items():
            if entry is None:
                info.pop(key, None)
            else:
                info[key] = entry
        occ = str(uuid.uuid4())
        self.fake.op_occs[occ] = {
            "id": occ,
            "operation": "MODIFY_INFO",
            "operationState": "COMPLETED",
            "vnfInstanceId": ident,
        }
        return web.Response(
            status=202, headers={"Location": f"{self.url}{V2}/vnf_lcm_op_occs/{occ}"}
        )


async def sim_cluster_vnf(
    sim: OpenStackSim, masters: list[str], workers: list[str], params: dict[str, Any]
) -> tuple[FakeTacker, str, str]:
    """A v2 cluster VNF whose VNFCs are stacks of ``sim`` at those addresses (its server
    pool must hold exactly them); (tacker data, instance, op-occ)."""
    tacker, _, inst, occ = cluster_vnf(masters, workers, params=params)
    cfg = sim.config
    heat = f"{sim.url}/heat-api/v1/{cfg.project_id}"
    async with aiohttp.ClientSession() as http:
        login = {
            "auth": {
                "identity": {
                    "methods": ["password"],
                    "password": {
                        "user": {
                            "name": cfg.username,
                            "domain": {"name": cfg.domain},
                            "password": cfg.password,
                        }
                    },
                },
                "scope": {"project": {"name": cfg.project_name, "domain": {"name": cfg.domain}}},
            }
        }
        async with http.post(f"{sim.auth_url}/auth/tokens", json=login) as resp:
            assert resp.status == 201, await resp.text()
            headers = {"X-Auth-Token": resp.headers["X-Subject-Token"]}
        by_ip: dict[str, tuple[str, str]] = {}  # address -> (stack name/id, server id)
        for index, cp in enumerate([MASTER_CP] * len(masters) + [WORKER_CP] * len(workers)):
            name = f"vnf-{inst}-{index}"
            create = {"stack_name": name, "template": _VNFC_HOT % {"cp": cp}}
            async with http.post(f"{heat}/stacks", json=create, headers=headers) as resp:
                assert resp.status == 201, await resp.text()
                stack = f"{name}/{(await resp.json())['stack']['id']}"
            async with http.get(f"{heat}/stacks/{stack}/resources", headers=headers) as resp:
                resources = (await resp.json())["resources"]
            server = next(
                r["physical_resource_id"]
                for r in resources
                if r["resource_type"] == "OS::Nova::Server"
            )
            async with http.get(f"{heat}/stacks/{stack}/resources/{cp}", headers=headers) as resp:
                port = (await resp.json())["resource"]["attributes"]
            by_ip[port["fixed_ips"][0]["ip_address"]] = (stack, server)
    assert sorted(by_ip) == sorted(masters + workers), by_ip
    # Point each VNFC (in cluster_vnf's order: masters, then workers) at its stack.
    vnfcs = tacker.instances[inst]["instantiatedVnfInfo"]["vnfcResourceInfo"]
    for vnfc, ip in zip(vnfcs, masters + workers, strict=True):
        stack, server = by_ip[ip]
        vnfc["metadata"] = {"stack_id": stack}
        vnfc["computeResource"]["resourceId"] = server
    return tacker, inst, occ
