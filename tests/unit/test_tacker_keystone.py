"""Keystone auth of the Tacker client against the simulated Keystone (tests/testbed/openstack_sim):
password tokens, the catalog lookup, and wrong credentials failing clearly."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import ValidationError

from subscriber.config import TackerSettings
from subscriber.errors import TackerAuthError, TackerRejected
from subscriber.tacker import TackerClient
from tests.testbed.openstack_sim import OpenStackSim, SimConfig
from tests.unit.scripted_tacker import ScriptedTacker


@pytest.fixture
async def keystone() -> AsyncIterator[OpenStackSim]:
    async with OpenStackSim(SimConfig()) as sim:
        yield sim


def password_settings(sim: OpenStackSim, **kw: Any) -> TackerSettings:
    base: dict[str, Any] = {
        "auth_type": "password",
        **sim.openstack_settings(),
        "retry_attempts": 2,
        "retry_initial": 0.01,
    }
    return TackerSettings(**{**base, **kw})


async def test_password_token_is_sent_and_reused(
    keystone: OpenStackSim, fake: ScriptedTacker
) -> None:
    fake.on("GET", "/vnflcm/v2/vnf_instances/i1", (200, {"id": "i1"}))
    async with TackerClient(password_settings(keystone, endpoint=fake.url)) as client:
        await client.get_vnf_instance("i1")
        await client.get_vnf_instance("i1")
    tokens = {h["X-Auth-Token"] for _, _, h, _ in fake.seen}
    assert len(tokens) == 1 and next(iter(tokens)).startswith("gAAAAA")
    posts = [c for c in keystone.calls if c["method"] == "POST" and "auth/tokens" in c["path"]]
    assert len(posts) == 1


async def test_wrong_password_is_one_clear_permanent_error(
    keystone: OpenStackSim, fake: ScriptedTacker
) -> None:
    secret = "wrong-" + "x" * 12
    settings = password_settings(keystone, endpoint=fake.url, password=secret)
    async with TackerClient(settings) as client:
        with pytest.raises(TackerAuthError) as info:
            await client.get_vnf_instance("i1")
    assert not info.value.retriable
    assert "Keystone refused the credentials" in info.value.message
    assert secret not in str(info.value) and "\n" not in str(info.value)
    assert fake.seen == []  # nothing reached Tacker


async def test_endpoint_from_the_catalog(keystone: OpenStackSim) -> None:
    # The simulator's catalog has no nfv-orchestration service: a clear error...
    async with TackerClient(password_settings(keystone)) as client:
        with pytest.raises(TackerRejected, match="no Tacker endpoint in the Keystone catalog"):
            await client.get_vnf_instance("i1")
    # ...and a service it has is found by type, interface and region.
    settings = password_settings(keystone, service_type="orchestration", interface="internal")
    async with TackerClient(settings) as client:
        assert client._auth is not None
        url = await client._auth.endpoint()
    assert url.endswith(f"/heat-api/v1/{keystone.config.project_id}")


def test_settings_are_validated() -> None:
    with pytest.raises(ValidationError, match="needs 'auth_url'"):
        TackerSettings(auth_type="password")
    with pytest.raises(ValidationError, match="needs its secret"):
        TackerSettings(
            auth_type="v3applicationcredential", auth_url="http://k", application_credential_id="a"
        )
    ok = TackerSettings(
        auth_type="v3applicationcredential",
        auth_url="http://k",
        application_credential_id="a",
        application_credential_secret="app-cred-secret-value",
    )
    assert ok.configured and "app-cred-secret-value" not in repr(ok)
