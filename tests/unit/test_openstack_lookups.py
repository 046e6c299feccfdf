"""subscriber.openstack against the simulated Keystone/Heat/Nova (openstacksdk, real HTTP)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from subscriber.config import OpenStackSettings
from subscriber.errors import OpenStackAuthFailed, OpenStackNotFound, OpenStackUnavailable
from subscriber.openstack import OpenStackClient
from tests.testbed.openstack_sim import OpenStackSim
from tests.unit.sim_cloud import Cloud

pytestmark = pytest.mark.asyncio


def settings(sim: OpenStackSim, password: str | None = None) -> OpenStackSettings:
    login = sim.openstack_settings()
    return OpenStackSettings(**{**login, "password": SecretStr(password or login["password"])})


async def test_ports_hosts_and_errors(cloud: Cloud) -> None:
    ident = await cloud.create("lookup-test", 2)
    members = await cloud.servers(ident)
    async with OpenStackClient(settings(cloud.sim)) as client:
        for member in members.values():
            ports = await client.port_addresses(member["stack"], "worker_CP")
            assert ports.fixed_ips == (member["ip"],)
            host = await client.server_host(member["id"])
            assert host in cloud.sim.config.compute_hosts
        with pytest.raises(OpenStackNotFound, match="404"):
            await client.port_addresses(ident, "no_such_CP")
        fault = {"service": "orchestration", "method": "GET", "path": "/resources/vip$"}
        await cloud.req("POST", f"{cloud.sim.url}/_sim/faults", {**fault, "status": 503}, 201)
        with pytest.raises(OpenStackUnavailable, match="503") as info:
            await client.port_addresses(ident, "vip")
        assert info.value.retriable
        assert (await client.port_addresses(ident, "vip")).fixed_ips == ("10.77.0.200",)
    async with OpenStackClient(settings(cloud.sim, "wrong-Passw0rd")) as client:
        with pytest.raises(OpenStackAuthFailed) as denied:
            await client.port_addresses(ident, "vip")
        assert not denied.value.retriable and "wrong-Passw0rd" not in str(denied.value)


async def test_server_stacks_map_each_server_to_its_member_stack(cloud: Cloud) -> None:
    """v1 discovery: the instance's top stack by name (as ``vnflcm_<id>``), every server
    of its AutoScalingGroup members -> the member's ``name/id``, where its ports are."""
    ident = await cloud.create("vnflcm_lookup", 3)
    members = await cloud.servers(ident)
    async with OpenStackClient(settings(cloud.sim)) as client:
        found = await client.server_stacks("vnflcm_lookup")
        assert found == {m["id"]: m["stack"] for m in members.values()}
        assert await client.server_stacks(ident) == found
        with pytest.raises(OpenStackNotFound):
            await client.server_stacks("vnflcm_no_such_instance")


PLACED_HOT = """
heat_template_version: 2016-10-14
resources:
  group:
    type: OS::Nova::ServerGroup
    properties: {name: workers, policies: [anti-affinity]}
  grouped_port:
    type: OS::Neutron::Port
    properties: {network: net0}
  grouped:
    type: OS::Nova::Server
    properties:
      flavor: m1.small
      image: ubuntu
      availability_zone: az-7
      networks: [{port: {get_resource: grouped_port}}]
      scheduler_hints: {group: {get_resource: group}}
  alone_port:
    type: OS::Neutron::Port
    properties: {network: net0}
  alone:
    type: OS::Nova::Server
    properties:
      flavor: m1.small
      image: ubuntu
      networks: [{port: {get_resource: alone_port}}]
"""


async def test_server_placement_reads_host_zone_and_anti_affinity(cloud: Cloud) -> None:
    body = await cloud.req(
        "POST", f"{cloud.heat}/stacks", {"stack_name": "placed", "template": PLACED_HOT}, 201
    )
    ident = f"placed/{body['stack']['id']}"
    ids = {r["resource_name"]: r["physical_resource_id"] for r in await cloud.resources(ident)}
    async with OpenStackClient(settings(cloud.sim)) as client:
        grouped = await client.server_placement(ids["grouped"])
        alone = await client.server_placement(ids["alone"])
        with pytest.raises(OpenStackNotFound):
            await client.server_placement("no-such-server")
    assert grouped.anti_affinity and grouped.availability_zone == "az-7"
    assert grouped.host in cloud.sim.config.compute_hosts
    assert not alone.anti_affinity and alone.availability_zone == cloud.sim.config.zone
