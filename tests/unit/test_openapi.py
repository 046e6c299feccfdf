"""The published OpenAPI document says what the callback really accepts and refuses.

Each example is held both against the document's request schema (jsonschema,
draft 2020-12, the OpenAPI 3.1 dialect) and against the running service over
real HTTP: accepted by one means 204 from the other, refused means 400.
"""

from __future__ import annotations

import copy
from typing import Any

import aiohttp
import jsonschema
import pytest

from schemas.openapi import OPENAPI_PATH
from tests.conftest import ServiceFactory, callback_url
from tests.factories import OPERATIONS, STATES, identifier, op_occ

pytestmark = pytest.mark.asyncio


def _without(body: dict[str, Any], *path: str) -> dict[str, Any]:
    out = copy.deepcopy(body)
    node = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return out


def _with(body: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return {**copy.deepcopy(body), key: value}


ACCEPTED = [
    *(
        op_occ(operation=o, state=s, version=v)
        for o in OPERATIONS[:4]
        for s in STATES
        for v in (1, 2)
    ),
    op_occ(operation="MODIFY_INFO", state="COMPLETED"),
    op_occ(verbosity="SHORT", state="COMPLETED"),
    _with(op_occ(), "someNewerField", {"kept": True}),
    identifier("Creation"),
    identifier("Deletion", version=1),
]
REFUSED = [
    _with(op_occ(), "id", ""),
    _with(op_occ(), "vnfInstanceId", ""),
    _with(op_occ(), "vnfLcmOpOccId", ""),
    _without(op_occ(), "vnfLcmOpOccId"),
    _without(op_occ(), "_links", "vnfInstance"),
    _with(op_occ(), "operationState", "DONE"),
    _with(op_occ(), "operation", "REBOOT"),
    _with(op_occ(), "notificationType", "SomethingElse"),
    _without(identifier("Creation"), "_links"),
    _with(identifier("Deletion"), "vnfInstanceId", ""),
]


async def test_document_matches_what_the_callback_accepts(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    svc = await start_service()
    async with http.get(f"http://127.0.0.1:{svc.port}{OPENAPI_PATH}") as resp:
        assert resp.status == 200
        doc = await resp.json()
    assert doc["openapi"].startswith("3.1")
    post = doc["paths"][svc.settings.http.path]["post"]
    assert {"204", "400", "401", "413", "415", "503"} <= set(post["responses"])
    request = post["requestBody"]["content"]["application/json"]["schema"]
    validator = jsonschema.Draft202012Validator({**request, "components": doc["components"]})
    url = callback_url(svc)
    for body in ACCEPTED:
        assert list(validator.iter_errors(body)) == [], body
        async with http.post(url, json=body) as resp:
            assert resp.status == 204, (body, await resp.text())
    for body in REFUSED:
        assert not validator.is_valid(body), body
        async with http.post(url, json=body) as resp:
            assert resp.status == 400, (body, await resp.text())
            assert resp.content_type == "application/problem+json"
