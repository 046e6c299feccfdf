"""``vim_name`` may only replace or delete a VIM this service registered (for that instance).

Against the real Tacker 16.0.0. Its kubernetes VIM driver will not register a VIM
without a reachable cluster (the test hosts here have none), so the VIMs already
there are written into Tacker's own database, as a ``POST /v1.0/vims`` would have left
them; the client lists and deletes them through Tacker's API. Before, a VIM of the
parameters' ``vim_name`` was deleted whenever its ``auth_url`` differed, whoever owned it.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import asyncpg
import pytest
from pydantic import SecretStr

from subscriber.config import TackerSettings
from subscriber.errors import VimNotOurs
from subscriber.kernel.ports import KubernetesAccess
from subscriber.tacker import TackerClient
from subscriber.tacker.client import VIM_MARKER, vim_description
from tests.testbed import tacker_bed

pytestmark = pytest.mark.tacker

ACCESS = KubernetesAccess(
    endpoint="https://10.0.0.5:6443",
    ssl_ca_cert="-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n",
    bearer_token=SecretStr("bearer-" + uuid.uuid4().hex),
)


async def _insert_vim(bed: Any, name: str, description: str, auth_url: str) -> str:
    """A kubernetes VIM row as Tacker's ``create_vim`` writes it (live: deleted_at = min)."""
    vim_id = str(uuid.uuid4())
    conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:5432/{bed.database}")
    try:
        async with conn.transaction():
            await conn.execute(
                "INSERT INTO vims (id, type, tenant_id, name, description, placement_attr,"
                " shared, is_default, created_at, deleted_at, extra)"
                # asyncpg would send datetime.min as -infinity: Tacker's datetime.min is this.
                " VALUES ($1, 'kubernetes', $2, $3, $4, '{}', false, false, $5,"
                " '0001-01-01 00:00:00', '{}')",
                vim_id,
                tacker_bed.PROJECT_ID,
                name,
                description,
                dt.datetime.now(dt.UTC).replace(tzinfo=None),
            )
            await conn.execute(
                "INSERT INTO vimauths (id, vim_id, password, auth_url, vim_project, auth_cred)"
                " VALUES ($1, $2, '', $3, $4, $5)",
                str(uuid.uuid4()),
                vim_id,
                auth_url,
                json.dumps({"name": "default"}),
                json.dumps({"bearer_token": "someone-elses", "auth_url": auth_url}),
            )
    finally:
        await conn.close()
    return vim_id


def _settings(bed: Any) -> TackerSettings:
    return TackerSettings(
        endpoint=bed.url,
        noauth_user_id=tacker_bed.USER_ID,
        noauth_project_id=tacker_bed.PROJECT_ID,
        register_vim=True,
        retry_attempts=1,
    )


async def _ids(client: TackerClient, name: str) -> list[str]:
    return [str(v["id"]) for v in await client.list_vims() if v.get("name") == name]


async def test_a_vim_we_did_not_register_is_never_replaced_or_deleted(bed: Any) -> None:
    name = f"production-{uuid.uuid4().hex[:8]}"
    theirs = await _insert_vim(bed, name, "the operator's own cluster", "https://10.9.9.9:6443")
    instance = str(uuid.uuid4())
    async with TackerClient(_settings(bed)) as client:
        assert await _ids(client, name) == [theirs]
        with pytest.raises(VimNotOurs, match=f"vim_name '{name}': Tacker's VIM {theirs}"):
            await client.register_vim(name, ACCESS, owner=instance)
        same_url = KubernetesAccess(
            endpoint="https://10.9.9.9:6443", ssl_ca_cert="x", bearer_token=SecretStr("t")
        )
        with pytest.raises(VimNotOurs):  # not even "reused": it is not ours to hand out
            await client.register_vim(name, same_url, owner=instance)
        with pytest.raises(VimNotOurs):
            await client.delete_vim(name, owner=instance)
        with pytest.raises(VimNotOurs):
            await client.delete_vim(name)
        assert await _ids(client, name) == [theirs]


async def test_a_vim_we_registered_for_another_instance_is_not_ours_either(bed: Any) -> None:
    name = f"shared-name-{uuid.uuid4().hex[:8]}"
    owner, other = str(uuid.uuid4()), str(uuid.uuid4())
    ours = await _insert_vim(bed, name, vim_description(owner), ACCESS.endpoint)
    async with TackerClient(_settings(bed)) as client:
        with pytest.raises(VimNotOurs, match=f"for VNF instance {other}"):
            await client.register_vim(name, ACCESS, owner=other)
        with pytest.raises(VimNotOurs):
            await client.delete_vim(name, owner=other)
        assert await _ids(client, name) == [ours]
        # Its own instance reuses it (same endpoint), then deletes it.
        assert await client.register_vim(name, ACCESS, owner=owner) == ours
        assert await client.delete_vim(name, owner=owner) == [name]
        assert await _ids(client, name) == []
        assert await client.delete_vim(name, owner=owner) == []


async def test_terminate_finds_our_vim_whatever_its_name(bed: Any) -> None:
    """A custom ``vim_name`` the TERMINATE request does not repeat: the instance's VIMs
    are found by the mark we gave them, and no one else's is touched."""
    owner = str(uuid.uuid4())
    custom = f"edge-{uuid.uuid4().hex[:8]}"
    ours = await _insert_vim(bed, custom, vim_description(owner), ACCESS.endpoint)
    theirs = await _insert_vim(bed, f"other-{owner}", "the operator's", ACCESS.endpoint)
    async with TackerClient(_settings(bed)) as client:
        assert await client.delete_vim(None, owner=owner) == [custom]
        assert await _ids(client, custom) == []
        assert await _ids(client, f"other-{owner}") == [theirs]
    assert ours


async def test_a_vim_of_an_older_version_is_ours_under_its_default_name(bed: Any) -> None:
    owner = str(uuid.uuid4())
    legacy = await _insert_vim(bed, f"kubernetes_vim_{owner}", VIM_MARKER, ACCESS.endpoint)
    elsewhere = f"kubernetes_vim_{uuid.uuid4()}"
    await _insert_vim(bed, elsewhere, VIM_MARKER, ACCESS.endpoint)
    async with TackerClient(_settings(bed)) as client:
        assert await client.register_vim(f"kubernetes_vim_{owner}", ACCESS, owner=owner) == legacy
        with pytest.raises(VimNotOurs):
            await client.delete_vim(elsewhere, owner=owner)
        assert await client.delete_vim(f"kubernetes_vim_{owner}", owner=owner) == [
            f"kubernetes_vim_{owner}"
        ]
