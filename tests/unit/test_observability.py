"""/metrics, /healthz and /readyz of a real Service on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from subscriber.health import CheckResult
from subscriber.kernel import RoutingTable
from tests.conftest import (
    ServiceFactory,
    callback_url,
    metric,
    scrape,
    wait_lanes_idle,
    wait_settled,
)
from tests.factories import identifier, op_occ, uid
from tests.operate_handler import OperateHandler


async def test_metrics_move_as_events_flow(
    start_service: ServiceFactory, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    fault = tmp_path / "fault"
    fault.touch()
    runs_file = tmp_path / "runs.txt"
    registry = RoutingTable()
    registry.register(OperateHandler(fault, runs_file))
    svc = await start_service(routing=registry, reorder_window=0.05)
    before = await scrape(http, svc)
    assert metric(before, "lccn_seconds_since_last_notification") == -1
    # The callback's answers exist at 0 from the start: an alert's rate() sees the first.
    assert 'lccn_http_responses_total{code="400",endpoint="callback"} 0.0' in before
    assert 'lccn_http_responses_total{code="503",endpoint="callback"} 0.0' in before
    assert (
        metric(
            before,
            'lccn_events_received_total{source="http",type="VnfLcmOperationOccurrence",state="COMPLETED"}',
        )
        == 0
    )

    url = callback_url(svc)
    instance, occ = uid(), uid()
    failing = op_occ(instance=instance, op_occ_id=occ, state="COMPLETED")
    for body in (failing, failing, identifier("Creation", instance=instance)):
        async with http.post(url, json=body) as resp:
            assert resp.status == 204
    await wait_settled(svc, 2)
    # A PROCESSING that arrives after COMPLETED was handled: recorded, skipped as stale.
    fault.unlink()
    async with http.post(
        url, json=op_occ(instance=instance, op_occ_id=occ, state="PROCESSING")
    ) as resp:
        assert resp.status == 204
    await wait_settled(svc, 3)
    await wait_lanes_idle(http, svc)
    await asyncio.sleep(1.1)  # past the 1 s cache of the store-backed gauges

    text = await scrape(http, svc)
    completed = (
        'lccn_events_received_total{source="http",type="VnfLcmOperationOccurrence",'
        'state="COMPLETED"}'
    )
    assert metric(text, completed) == 1
    assert (
        metric(
            text, 'lccn_events_received_total{source="http",type="VnfIdentifierCreation",state=""}'
        )
        == 1
    )
    expected = {
        'lccn_events_duplicate_total{source="http"}': 1,
        'lccn_events_skipped_total{reason="stale"}': 1,
        'lccn_ingest_latency_seconds_count{source="http"}': 4,
        'lccn_jobs_total{outcome="failed",mode="live"}': 1,
        'lccn_jobs_total{outcome="ignored",mode="live"}': 1,
        'lccn_step_duration_seconds_count{step="install",outcome="failed"}': 1,
        'lccn_step_duration_seconds_count{step="discover",outcome="done"}': 1,
        "lccn_failed_events": 1,
        "lccn_poison_events": 0,
        "lccn_lanes_past_lease": 0,
        "lccn_hooks_waiting": 0,
        'lccn_queue_depth{status="pending"}': 0,
    }
    assert {name: metric(text, name) for name in expected} == expected
    # Every answer of the listener, by endpoint and code: the four notifications...
    assert metric(text, 'lccn_http_responses_total{endpoint="callback",code="204"}') == 4
    assert metric(text, 'lccn_http_responses_total{endpoint="probes",code="200"}') >= 2
    assert metric(text, 'lccn_ready{check="store"}') == 1
    assert 0 <= metric(text, "lccn_seconds_since_last_notification") < 30
    # Another component's gauge (Kafka lag) shows up in the same registry.
    svc.metrics.consumer_lag.labels("lccn-notifications", "0").set(7)
    text = await scrape(http, svc)
    assert metric(text, 'lccn_consumer_lag{topic="lccn-notifications",partition="0"}') == 7
    # ...and the refused ones: not JSON (415), no notification (400), a path nobody
    # serves (404, counted under "other", never by the path a client chose).
    async with http.post(url, data=b"x", headers={"Content-Type": "text/plain"}) as resp:
        assert resp.status == 415
    async with http.post(url, json={"notificationType": "nonsense"}) as resp:
        assert resp.status == 400
    async with http.get(f"http://127.0.0.1:{svc.port}/no/such/{uid()}") as resp:
        assert resp.status == 404
    text = await scrape(http, svc)
    assert metric(text, 'lccn_http_responses_total{endpoint="callback",code="415"}') == 1
    assert metric(text, 'lccn_http_responses_total{endpoint="callback",code="400"}') == 1
    assert metric(text, 'lccn_http_responses_total{endpoint="other",code="404"}') == 1
    assert "/no/such" not in text
    # One process, one worker of its own: no worker families.
    assert "lccn_worker_up" not in text


async def test_healthz_readyz_and_pluggable_checks(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    svc = await start_service()
    base = f"http://127.0.0.1:{svc.port}"
    async with http.get(f"{base}/healthz") as resp:
        assert resp.status == 200 and (await resp.json()) == {"status": "ok"}
    async with http.get(f"{base}/readyz") as resp:
        assert resp.status == 200
        body = await resp.json()
    # No callback credentials here: said in the detail, the service stays ready.
    assert body == {
        "status": "ready",
        "checks": {
            "store": {"ok": True, "detail": ""},
            "callback_auth": {"ok": True, "detail": "callback auth off"},
        },
    }

    assigned = asyncio.Event()

    async def kafka_assigned() -> CheckResult:
        return CheckResult(assigned.is_set(), "" if assigned.is_set() else "no partitions yet")

    svc.health.register("kafka", kafka_assigned)
    await asyncio.sleep(1.05)  # the cached answer expires
    async with http.get(f"{base}/readyz") as resp:
        assert resp.status == 503
        body = await resp.json()
    assert body["checks"]["kafka"] == {"ok": False, "detail": "no partitions yet"}
    # The same checks as gauges, for alerts (lccn_ready).
    text = await scrape(http, svc)
    assert metric(text, 'lccn_ready{check="kafka"}') == 0
    assert metric(text, 'lccn_ready{check="store"}') == 1
    async with http.get(f"{base}/healthz") as resp:
        assert resp.status == 200  # liveness does not depend on readiness checks
    assigned.set()
    await asyncio.sleep(1.05)
    async with http.get(f"{base}/readyz") as resp:
        assert resp.status == 200
    assert metric(await scrape(http, svc), 'lccn_ready{check="kafka"}') == 1


class _Partitions:
    """What ``Service`` reads of its Kafka source for ``/metrics`` and ``/readyz``."""

    def __init__(self) -> None:
        self.assigned: dict[tuple[str, int], int] = {}
        self.ready = True
        self.failure: str | None = None

    def lag(self) -> dict[tuple[str, int], int]:
        return dict(self.assigned)


async def test_consumer_lag_shows_only_the_partitions_assigned_now(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    svc = await start_service()
    source = _Partitions()
    svc._observe_kafka(source)  # type: ignore[arg-type]
    source.assigned = {("t", 0): 5, ("t", 1): 3}
    text = await scrape(http, svc)
    assert metric(text, 'lccn_consumer_lag{topic="t",partition="0"}') == 5
    assert metric(text, 'lccn_consumer_lag{topic="t",partition="1"}') == 3
    # A rebalance gave partition 0 to another replica: it reports it, not we (a sum over
    # replicas counts each partition once).
    source.assigned = {("t", 1): 2}
    text = await scrape(http, svc)
    assert 'partition="0"' not in text
    assert metric(text, 'lccn_consumer_lag{topic="t",partition="1"}') == 2
