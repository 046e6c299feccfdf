"""Fixtures of the unit tier: the simulated cloud and a scripted Tacker, each on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.testbed.openstack_sim import OpenStackSim, SimConfig
from tests.unit.scripted_tacker import ScriptedTacker
from tests.unit.sim_cloud import Cloud


@pytest.fixture
async def cloud() -> AsyncIterator[Cloud]:
    """The simulated cloud in this process, logged in."""
    cfg = SimConfig(server_pool="10.77.0.11-10.77.0.14", vip_pool="10.77.0.200")
    async with OpenStackSim(cfg) as sim, aiohttp.ClientSession() as http:
        c = Cloud(sim, http)
        assert (await c.login()).status == 201
        yield c


@pytest.fixture
async def fake() -> AsyncIterator[ScriptedTacker]:
    """A scripted Tacker on a free loopback port."""
    server = ScriptedTacker()
    await server.start()
    yield server
    await server.stop()
