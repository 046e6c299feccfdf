"""Retention, on SQLite and PostgreSQL: settled events go with their jobs and steps, in time.

The store's prune and dry-run count, ``events prune`` on the command line,
and ``serve``'s background pruner keeping the store bounded under a steady
stream.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import aiohttp
import pytest

from schemas import parse_notification
from subscriber.config import (
    DatabaseSettings,
    DispatchSettings,
    HttpSettings,
    RetentionSettings,
    Settings,
    parse_duration,
)
from subscriber.service import Service
from subscriber.store import EventStatus, NewEvent, PruneCounts, Store
from subscriber.store.jobs import StepOutcome
from tests.conftest import callback_url, free_port
from tests.factories import op_occ, uid
from tests.programs import cli
from tests.recorders import Recorder, registry_with

pytestmark = pytest.mark.asyncio


async def _event(store: Store, status: str, steps: int = 2) -> int:
    """An event with one job of ``steps`` steps, left in ``status``."""
    raw = json.dumps(op_occ(instance=uid(), state="COMPLETED")).encode()
    new = NewEvent(source="http", notification=parse_notification(raw), raw=raw)
    event_id = (await store.events.append(new)).event_id
    if status == EventStatus.PENDING:
        return event_id
    job = await store.jobs.create(event_id, "h", "live", EventStatus.RUNNING)
    for i in range(steps):
        await store.jobs.step_finished(job.id, StepOutcome(i, f"s{i}", True, "done", time.time()))
    job_status = status if status in ("done", "failed", "retry") else "done"
    await store.jobs.update(job.id, event_id=event_id, status=job_status, event_status=status)
    return event_id


async def _left(store: Store) -> dict[int, tuple[str, int, int]]:
    out = {}
    for e in await store.events.list():
        jobs = await store.jobs.for_event(e.id)
        steps = sum([len(await store.jobs.steps(j.id)) for j in jobs])
        out[e.id] = (e.status, len(jobs), steps)
    return out


async def test_prune_takes_settled_events_with_their_jobs_and_steps_and_keeps_the_rest(
    store: Store,
) -> None:
    old = {s: await _event(store, s) for s in ("done", "ignored", "stale", "echo", "failed")}
    old_open = {s: await _event(store, s) for s in ("pending", "running", "retry")}
    await asyncio.sleep(0.05)
    cutoff = time.time()
    await asyncio.sleep(0.05)
    young = await _event(store, "done")

    dry = await store.retention.count(cutoff)
    assert dry == PruneCounts(events=4, jobs=4, steps=8)
    assert len(await _left(store)) == 9  # a dry run deletes nothing
    assert await store.retention.prune(cutoff, batch=3) == dry  # in batches, the same
    left = await _left(store)
    assert set(left) == {old["failed"], *old_open.values(), young}
    assert left[old["failed"]] == ("failed", 1, 2)  # kept for a replay, whole
    assert left[young] == ("done", 1, 2)

    assert await store.retention.prune(cutoff) == PruneCounts()  # nothing more
    with_failed = await store.retention.prune(cutoff, include_failed=True)
    assert with_failed == PruneCounts(events=1, jobs=1, steps=2)
    assert set(await _left(store)) == {*old_open.values(), young}  # open ones never go


async def test_prune_takes_the_hooks_old_requests_and_answers(store: Store) -> None:
    old = [f"hook:{uid()}:COMPLETED", f"hook-answer:{uid()}"]
    for key in [*old, "reconcile.watermark"]:
        await store.tacker.set_value(key, "{}")
    await asyncio.sleep(0.05)
    cutoff = time.time()
    await asyncio.sleep(0.05)
    young = f"hook:{uid()}:PROCESSING"
    await store.tacker.set_value(young, "{}")
    await store.retention.prune(cutoff)
    assert [await store.tacker.get_value(k) for k in old] == [None, None]
    assert await store.tacker.get_value(young) == "{}"
    assert await store.tacker.get_value("reconcile.watermark") == "{}"  # not a hook's


async def test_events_prune_on_the_command_line(store: Store, db_url: str) -> None:
    for status in ("done", "done", "failed", "pending"):
        await _event(store, status, steps=3)
    await asyncio.sleep(0.05)
    args = ("events", "prune", "--database", db_url)

    out = cli(*args, "--older-than", "0s", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1
    assert re.fullmatch(
        r"would prune 2 events, 2 jobs, 6 steps \(settled, last changed before \S+Z\)\n",
        out.stdout,
    )
    assert len(await store.events.list()) == 4

    out = cli(*args, "--older-than", "30d")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("pruned 0 events, 0 jobs, 0 steps")
    out = cli(*args, "--older-than", "0s")
    assert out.stdout.startswith("pruned 2 events, 2 jobs, 6 steps (settled,")
    out = cli(*args, "--older-than", "0s", "--include-failed")
    assert out.stdout.startswith("pruned 1 events, 1 jobs, 3 steps (settled and failed,")
    assert [e.status for e in await store.events.list()] == ["pending"]

    out = cli(*args, "--older-than", "soon")
    assert out.returncode == 2 and "not a duration" in out.stderr


async def test_durations() -> None:
    assert parse_duration("30d") == 30 * 86400
    assert parse_duration("12h") == 43200 and parse_duration("90") == 90
    assert RetentionSettings(max_age="15m").max_age == 900  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        parse_duration("-1d")


async def test_serve_keeps_the_store_bounded_under_a_steady_stream(db_url: str) -> None:
    settings = Settings(
        http=HttpSettings(host="127.0.0.1", port=free_port()),
        database=DatabaseSettings(url=db_url),
        dispatch=DispatchSettings(rescan_interval=0.5, reorder_window=0),
        retention=RetentionSettings(max_age=1.0, interval=0.2),
    )
    svc = Service(settings, routing=registry_with(Recorder()))
    sent, peak = 0, 0
    async with svc, aiohttp.ClientSession() as http:
        assert svc.pruner is not None
        # At least 6 s (six max_ages, so the prune must keep up) and 150 events, however
        # slowly a loaded machine sends them.
        stop = time.monotonic() + 6
        while sent < 150 or time.monotonic() < stop:
            body = op_occ(instance=uid(), state="COMPLETED")
            async with http.post(callback_url(svc), json=body) as resp:
                assert resp.status == 204
            sent += 1
            if sent % 10 == 0:
                peak = max(peak, len(await svc.store.events.list()))
            await asyncio.sleep(0.01)
        async with asyncio.timeout(20):  # the tail goes too, once old enough
            while await svc.store.events.list():
                await asyncio.sleep(0.1)
        assert svc.pruner.runs > 5
    print(f"\nretention: sent={sent} peak stored={peak} final=0 (max_age 1 s, interval 0.2 s)")
    assert peak < sent / 2, f"the store grew with the stream: peak {peak} of {sent}"
