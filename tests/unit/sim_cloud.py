"""A client of the simulated cloud for the unit tier: Keystone login, Heat stacks of a
server group, and the servers and ports they made (the ``cloud`` fixture)."""

from __future__ import annotations

from typing import Any

import aiohttp

from tests.testbed.openstack_sim import OpenStackSim

GROUP_HOT = """
heat_template_version: 2013-05-23
parameters:
  nfv: {type: json}
resources:
  vip:
    type: OS::Neutron::Port
    properties: {network: net0}
  workers:
    type: OS::Heat::AutoScalingGroup
    properties:
      min_size: 1
      max_size: 4
      desired_capacity: { get_param: [nfv, VDU, worker, desired_capacity] }
      resource:
        type: worker.yaml
        properties:
          net: { get_param: [nfv, CP, worker_CP, network] }
          vip_ip: { get_attr: [vip, fixed_ips, 0, ip_address] }
"""
WORKER_HOT = """
heat_template_version: 2013-05-23
parameters:
  net: {type: string}
  vip_ip: {type: string}
resources:
  worker:
    type: OS::Nova::Server
    properties:
      flavor: m1.small
      image: img
      networks:
        - port: { get_resource: worker_CP }
  worker_CP:
    type: OS::Neutron::Port
    properties:
      network: { get_param: net }
      allowed_address_pairs: [{ip_address: { get_param: vip_ip }}]
"""


class Cloud:
    def __init__(self, sim: OpenStackSim, http: aiohttp.ClientSession) -> None:
        self.sim, self.http = sim, http
        self.heat = f"{sim.url}/heat-api/v1/{sim.config.project_id}"
        self.token = ""

    async def login(self, password: str | None = None) -> aiohttp.ClientResponse:
        c = self.sim.config
        body = {
            "auth": {
                "identity": {
                    "methods": ["password"],
                    "password": {
                        "user": {
                            "name": c.username,
                            "domain": {"name": c.domain},
                            "password": password or c.password,
                        }
                    },
                },
                "scope": {"project": {"name": c.project_name, "domain": {"name": c.domain}}},
            }
        }
        resp = await self.http.post(f"{self.sim.auth_url}/auth/tokens", json=body)
        self.token = resp.headers.get("X-Subject-Token", "")
        return resp

    async def req(self, method: str, url: str, body: Any = None, status: int = 200) -> Any:
        async with self.http.request(
            method, url, json=body, headers={"X-Auth-Token": self.token}
        ) as resp:
            assert resp.status == status, (method, url, resp.status, await resp.text())
            return await resp.json() if resp.content_length else None

    async def create(self, name: str, workers: int) -> str:
        nfv = {
            "VDU": {"worker": {"desired_capacity": workers}},
            "CP": {"worker_CP": {"network": "net0"}},
        }
        body = await self.req(
            "POST",
            f"{self.heat}/stacks",
            {
                "stack_name": name,
                "template": GROUP_HOT,
                "files": {"worker.yaml": WORKER_HOT},
                "parameters": {"nfv": nfv},
            },
            201,
        )
        return f"{name}/{body['stack']['id']}"

    async def resources(self, ident: str) -> list[dict[str, Any]]:
        body = await self.req("GET", f"{self.heat}/stacks/{ident}/resources?nested_depth=2")
        return body["resources"]  # type: ignore[no-any-return]

    async def servers(self, ident: str) -> dict[str, dict[str, Any]]:
        """member name -> {server id, ip, stack} of the group's members."""
        reses = await self.resources(ident)
        out = {}
        for r in reses:
            if r["resource_type"] == "OS::Nova::Server":
                stack = next(li["href"] for li in r["links"] if li["rel"] == "stack")
                stack_ident = "/".join(stack.split("/")[-2:])
                cp = await self.req("GET", f"{self.heat}/stacks/{stack_ident}/resources/worker_CP")
                out[r["parent_resource"]] = {
                    "id": r["physical_resource_id"],
                    "stack": stack_ident,
                    "ip": cp["resource"]["attributes"]["fixed_ips"][0]["ip_address"],
                }
        return out
