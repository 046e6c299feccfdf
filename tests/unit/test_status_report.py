"""The ``lccn`` status entry: after the job of a COMPLETED notification (no hook ran it)
ends, the instance's ``metadata`` says how it went, PATCHed through the real Tacker client
to a scripted Tacker on loopback (the real Tacker shows it in ``tests/e2e``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from handlers.instantiate import InstantiateCluster
from handlers.log import LogHandler
from schemas import parse_notification_data
from subscriber.config import TackerSettings
from subscriber.runner import JobOutcome
from subscriber.status import StatusReporter
from subscriber.store import EventRow, NewEvent, Store
from subscriber.tacker import TackerClient
from tests.factories import op_occ, uid, v1_op_occ
from tests.unit.scripted_tacker import ScriptedTacker

pytestmark = pytest.mark.asyncio


def settings(url: str) -> TackerSettings:
    return TackerSettings(endpoint=url, retry_attempts=1, retry_initial=0.01, retry_max=0.02)


async def event(
    store: Store, state: str = "COMPLETED", source: str = "http", **kw: Any
) -> EventRow:
    body = op_occ(operation="INSTANTIATE", state=state, **kw)
    new = NewEvent(source=source, notification=parse_notification_data(body), body=body)
    row = await store.events.get((await store.events.append(new)).event_id)
    assert row is not None
    return row


async def sent(fake: ScriptedTacker, count: int) -> list[tuple[str, str, dict[str, str], Any]]:
    async with asyncio.timeout(10):
        while len(patches := [s for s in fake.seen if s[0] == "PATCH"]) < count:
            await asyncio.sleep(0.01)
    return patches


async def test_a_settled_cluster_job_is_reported_in_the_instances_metadata(
    fake: ScriptedTacker, store: Store
) -> None:
    done, failed = await event(store), await event(store)
    assert done.vnf_instance_id and failed.vnf_instance_id
    for row in (done, failed):
        path = f"/vnflcm/v2/vnf_instances/{row.vnf_instance_id}"
        loc = {"Location": f"{fake.url}/vnflcm/v2/vnf_lcm_op_occs/{uid()}"}
        fake.on("PATCH", path, 409, (202, None, loc))  # busy once: tried again
    async with TackerClient(settings(fake.url), echo=store.tacker) as client:
        reporter = StatusReporter(
            client, settings(fake.url), reports=lambda h: isinstance(h, InstantiateCluster)
        )
        async with reporter:
            handler = InstantiateCluster()
            reporter.job_settled(done, handler, JobOutcome.DONE)
            reason = "join-workers: worker35: kubeadm join exit 1\n  password=hunter2-secret"
            reporter.job_settled(failed, handler, JobOutcome.FAILED, reason=reason)
            patches = await sent(fake, 4)
    ok = [p for p in patches if p[1].endswith(str(done.vnf_instance_id))][-1]
    assert ok[2]["Content-Type"] == "application/merge-patch+json"
    entry = ok[3]["metadata"]["lccn"]
    assert entry["state"] == "done" and entry["reason"] is None
    assert (entry["operation"], entry["opOccId"], entry["eventId"]) == (
        "INSTANTIATE",
        done.vnf_lcm_op_occ_id,
        done.id,
    )
    assert entry["at"].endswith("Z")
    bad = [p for p in patches if p[1].endswith(str(failed.vnf_instance_id))][-1][3]["metadata"]
    assert bad["lccn"]["state"] == "failed"
    assert bad["lccn"]["reason"].startswith("join-workers: worker35: kubeadm join exit 1 ")
    assert "hunter2-secret" not in bad["lccn"]["reason"] and "\n" not in bad["lccn"]["reason"]
    # Our PATCHes' MODIFY_INFO op-occs are known as our own echo.
    assert await store.tacker.own_op_occs(str(done.vnf_instance_id))


async def test_what_is_not_reported(fake: ScriptedTacker, store: Store) -> None:
    async with TackerClient(settings(fake.url), echo=store.tacker) as client:
        reporter = StatusReporter(
            client, settings(fake.url), reports=lambda h: isinstance(h, InstantiateCluster)
        )
        async with reporter:
            handler = InstantiateCluster()
            # A hook ran it (Tacker's op-occ says how it went), a job at another state, one
            # that ended early (a CNF; a COMPLETED whose hook ran the job), another handler.
            reporter.job_settled(await event(store, source="hook"), handler, JobOutcome.DONE)
            reporter.job_settled(await event(store, "STARTING"), handler, JobOutcome.FAILED)
            early = await event(store)
            reporter.job_settled(early, handler, JobOutcome.DONE, ended_early=True)
            reporter.job_settled(await event(store), LogHandler(), JobOutcome.DONE)
            assert reporter.pending == 0  # decided at once: nothing was queued
    assert [s for s in fake.seen if s[0] == "PATCH"] == []


async def test_v1_gets_the_entry_as_json_text(fake: ScriptedTacker, store: Store) -> None:
    """v1 keeps ``metadata`` values as strings (a map fails the real Tacker's MODIFY_INFO)."""
    body = v1_op_occ(operation="SCALE", state="COMPLETED", base=fake.url)
    new = NewEvent(source="http", notification=parse_notification_data(body), body=body)
    row = await store.events.get((await store.events.append(new)).event_id)
    assert row is not None and row.vnf_instance_id
    loc = {"Location": f"{fake.url}/vnflcm/v1/vnf_lcm_op_occs/{uid()}"}
    fake.on("PATCH", f"/vnflcm/v1/vnf_instances/{row.vnf_instance_id}", (202, None, loc))
    async with TackerClient(settings(fake.url), echo=store.tacker) as client:
        reporter = StatusReporter(client, settings(fake.url), reports=lambda h: True)
        async with reporter:
            reporter.job_settled(row, InstantiateCluster(), JobOutcome.DONE)
            [patch] = await sent(fake, 1)
    assert patch[1] == f"/vnflcm/v1/vnf_instances/{row.vnf_instance_id}"
    text = patch[3]["metadata"]["lccn"]
    assert isinstance(text, str) and "\n" not in text
    assert json.loads(text)["state"] == "done" and json.loads(text)["operation"] == "SCALE"
