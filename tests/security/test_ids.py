"""Ids are validated at ingest: a bad one is refused for its own request or record alone.

Over HTTP it is a 400 ProblemDetails naming the field, and the other callbacks of the
same group commit are stored (204); on Kafka it is a poison record, and the partition
moves on past it. Before, an id longer than its PostgreSQL column failed the whole
group commit (every callback of the batch got 503) and the Kafka source retried it
forever (the partition stalled); ids walking a URL path were stored and acted on.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from subscriber.config import DatabaseSettings, HookSettings, TackerSettings
from subscriber.ingest.kafka import KafkaSource
from subscriber.service import Service
from subscriber.store import Store
from subscriber.tacker import TackerClient
from subscriber.tacker.reconciler import WATERMARK_KEY, Reconciler
from tests.conftest import ServiceFactory, callback_url, make_settings
from tests.factories import op_occ, uid
from tests.kafka.helpers import create_topic, fast_settings, notification, produce, wait_until
from tests.loopback import listen

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres]

TOO_LONG = "a" * 300  # longer than any of the store's 255-character id columns


@pytest.fixture
def db_url(pg_url: str) -> str:  # the services of this module store on PostgreSQL
    return pg_url


async def _post(http: aiohttp.ClientSession, svc: Service, body: Any, **kw: Any) -> tuple[int, Any]:
    async with http.post(callback_url(svc), json=body, **kw) as resp:
        data = await resp.json(content_type=None) if resp.status != 204 else None
        return resp.status, data


@pytest.mark.parametrize("field", ["vnfInstanceId", "vnfLcmOpOccId", "id", "subscriptionId"])
async def test_an_overlong_id_does_not_fail_its_group_commit(
    start_service: ServiceFactory, http: aiohttp.ClientSession, field: str
) -> None:
    svc = await start_service()
    good = [op_occ() for _ in range(30)]
    bad = dict(op_occ(), **{field: TOO_LONG})
    # All at once, so the good ones share group commits with the bad one.
    results = await asyncio.gather(*(_post(http, svc, body) for body in [*good, bad, *good[:5]]))
    statuses = [status for status, _ in results]
    assert statuses[30] == 400, results[30]
    assert statuses[:30] + statuses[31:] == [204] * 35
    problem = results[30][1]
    assert problem["status"] == 400 and field in problem["detail"]
    assert TOO_LONG not in json.dumps(problem)  # the value is not echoed
    stored = await svc.store.events.list()
    assert sorted(e.vnf_lcm_op_occ_id for e in stored) == sorted(b["vnfLcmOpOccId"] for b in good)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vnfInstanceId", "../../../v1.0/vims"),
        ("vnfInstanceId", "a/b"),
        ("vnfLcmOpOccId", ".."),
        ("vnfLcmOpOccId", "occ\nINSTANTIATE"),
        ("vnfInstanceId", "has space"),
        ("vnfInstanceId", ""),
        ("subscriptionId", "../subscriptions"),
        ("id", "%2e%2e"),
    ],
)
async def test_an_id_that_is_not_an_id_is_refused_at_ingest(
    start_service: ServiceFactory, http: aiohttp.ClientSession, field: str, value: str
) -> None:
    svc = await start_service()
    status, problem = await _post(http, svc, dict(op_occ(), **{field: value}))
    assert status == 400
    assert f"'{field}'" in problem["detail"] and "must be an id" in problem["detail"]
    assert await svc.store.events.list() == []


async def test_tacker_style_and_test_style_ids_are_still_accepted(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    svc = await start_service()
    for instance, occ in [
        (uid(), uid()),  # Tacker's: UUIDs
        (f"busy-{uid()}", "occ-v1"),  # the tests' own
        ("i", "o"),
        ("urn:vnf:1.2_3", "x" * 128),  # the longest id accepted
    ]:
        status, problem = await _post(http, svc, op_occ(instance=instance, op_occ_id=occ))
        assert status == 204, problem
    assert len(await svc.store.events.list()) == 4


async def test_a_long_version_header_does_not_fail_its_group_commit(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    svc = await start_service()
    good = [op_occ() for _ in range(20)]
    bad = _post(http, svc, op_occ(), headers={"Version": "2." + "0" * 40})
    results = await asyncio.gather(bad, *(_post(http, svc, b) for b in good))
    assert results[0][0] == 400 and "Version" in results[0][1]["detail"]
    assert [status for status, _ in results[1:]] == [204] * 20
    assert len(await svc.store.events.list()) == 20


# -- the drain hook -----------------------------------------------------------------------

TOKEN = "hook-token-8d1e5b0c27"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def hooked(db_url: str) -> AsyncIterator[Service]:
    settings = make_settings(db_url).model_copy(update={"hooks": HookSettings(token=TOKEN)})
    svc = Service(settings)
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vnfLcmOpOccId", "../../../v1.0/vims"),
        ("vnfLcmOpOccId", "o" * 250),  # "hook:" + it outgrows the kv key column
        ("vnfInstanceId", "inst/../other"),
        ("servers", ["server\n1"]),
    ],
)
async def test_the_drain_hook_refuses_ids_that_are_not_ids(
    hooked: Service, http: aiohttp.ClientSession, field: str, value: Any
) -> None:
    url = f"http://127.0.0.1:{hooked.port}{hooked.settings.hooks.path}"
    body = {
        "vnfInstanceId": uid(),
        "vnfLcmOpOccId": uid(),
        "point": "scale_start",
        "servers": [uid()],
    }
    body[field] = value
    async with http.post(url, json=body, headers=AUTH) as resp:
        assert resp.status == 400, await resp.text()
        problem = await resp.json(content_type=None)
    assert problem["detail"].startswith(field)
    assert await hooked.store.events.list() == []
    async with http.get(f"{url}/..%2F..%2Fvims/scale_start", headers=AUTH) as resp:
        assert resp.status == 400


# -- Kafka --------------------------------------------------------------------------------


@pytest.mark.kafka
async def test_an_overlong_id_on_kafka_is_poison_not_a_stalled_partition(
    broker: Any, pg_url: str
) -> None:
    topic, group = uid(), uid()
    await create_topic(broker.bootstrap, topic, 1)
    vnf = uid()
    before = notification(vnf, uid())
    after = [notification(vnf, uid()) for _ in range(3)]
    await produce(broker.bootstrap, topic, [before, notification(TOO_LONG, uid()), *after])
    async with (
        Store(DatabaseSettings(url=pg_url)) as store,
        KafkaSource(fast_settings(broker.bootstrap, topic, group), store.events) as source,
    ):
        await wait_until(
            lambda: source.status().stored == 4 and source.status().poison == 1,
            30,
            what="4 events and 1 poison record",
        )
        await wait_until(lambda: source.lag() == {(topic, 0): 0}, 10, what="no lag")
        poison = await store.events.list(status="poison")
    assert [p.meta_json()["kafka"]["offset"] for p in poison] == [1]
    assert poison[0].meta_json()["field"] == "vnfInstanceId"
    assert "must be an id" in (poison[0].status_detail or "")


# -- the reconciler -----------------------------------------------------------------------


async def test_the_reconciler_skips_an_op_occ_whose_ids_are_not_ids(pg_url: str) -> None:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    good = {"id": uid(), "vnfInstanceId": uid(), "operation": "INSTANTIATE"}
    occs = [
        {"id": TOO_LONG, "vnfInstanceId": uid(), "operation": "INSTANTIATE"},
        {"id": uid(), "vnfInstanceId": "../../v1.0/vims", "operation": "INSTANTIATE"},
        good,
    ]
    for occ in occs:
        occ.update(operationState="COMPLETED", stateEnteredTime=now)

    async def listing(request: web.Request) -> web.Response:
        return web.json_response(occs)

    app = web.Application()
    app.router.add_get("/vnflcm/v2/vnf_lcm_op_occs", listing)
    runner = web.AppRunner(app)
    settings = TackerSettings(
        endpoint=await listen(runner),
        noauth_user_id="u" * 32,
        noauth_project_id="p" * 32,
        reconcile_overlap=60,
        retry_attempts=1,
    )
    try:
        async with (
            Store(DatabaseSettings(url=pg_url)) as store,
            TackerClient(settings) as client,
        ):
            await store.tacker.set_value(WATERMARK_KEY, now)
            reconciler = Reconciler(store, client, settings)
            assert await reconciler.reconcile_once() >= 1  # the pass is not failed by them
            stored = await store.events.list()
    finally:
        await runner.cleanup()
    assert {e.vnf_lcm_op_occ_id for e in stored} == {good["id"]}
