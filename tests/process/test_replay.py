"""Failed-event store and replay: a real Service, a real SQLite file, the real CLI."""

from __future__ import annotations

import asyncio
import getpass
import json
import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from subscriber.kernel import RoutingTable
from subscriber.service import Service
from tests.conftest import ServiceFactory, callback_url, wait_lanes_idle, wait_settled
from tests.factories import op_occ, uid
from tests.operate_handler import OperateHandler, handler_env, runs
from tests.programs import cli


@dataclass
class Rig:
    """A real Service on ``db_url`` running :class:`OperateHandler`, whose steps fail while
    ``fault`` exists and log their runs to ``runs_file``."""

    start_service: ServiceFactory
    http: aiohttp.ClientSession
    db_url: str
    fault: Path
    runs_file: Path

    async def start(self, **handler: Any) -> Service:
        return await self.start_service(
            routing=_registry(OperateHandler(self.fault, self.runs_file, **handler))
        )

    async def post(self, svc: Service, body: dict[str, Any]) -> None:
        async with self.http.post(callback_url(svc), json=body) as resp:
            assert resp.status == 204, await resp.text()

    def started(self) -> Counter[str]:
        """How often each step has started, over every job."""
        return Counter(step for _, _, step, what, _ in runs(self.runs_file) if what == "start")

    async def failed_event(self, **handler: Any) -> tuple[Service, Any, dict[str, Any]]:
        """A started Service and one INSTANTIATE COMPLETED event it failed (``fault`` set)."""
        svc = await self.start(**handler)
        body = op_occ(operation="INSTANTIATE", state="COMPLETED")
        await self.post(svc, body)
        (event,) = await wait_settled(svc, 1)
        assert event.status == "failed"
        return svc, event, body


@pytest.fixture
def rig(
    start_service: ServiceFactory, http: aiohttp.ClientSession, db_url: str, tmp_path: Path
) -> Rig:
    fault, runs_file = tmp_path / "fault", tmp_path / "runs.txt"
    fault.touch()
    runs_file.touch()
    return Rig(start_service, http, db_url, fault, runs_file)


def _registry(handler: OperateHandler) -> RoutingTable:
    r = RoutingTable()
    r.register(handler)
    return r


def _sqlite_path(db_url: str) -> str:
    return db_url.split(":///", 1)[1]


def _dump(db_url: str, skip: tuple[str, ...] = ()) -> list[str]:
    """Every row of every table, as SQL text (``skip``: tables left out)."""
    with sqlite3.connect(_sqlite_path(db_url)) as conn:
        return [
            line
            for line in conn.iterdump()
            if not any(line.startswith(f'INSERT INTO "{t}"') for t in skip)
        ]


async def _failed_then_replayed(svc: Service, event_id: int, mode: str) -> tuple[Any, list[Any]]:
    """The event's two jobs are the live one, failed, and a replay in ``mode``, done: the
    failed job and the replay's steps."""
    jobs = await svc.store.jobs.for_event(event_id)
    assert [(j.mode, j.status) for j in jobs] == [("live", "failed"), (mode, "done")]
    return jobs[0], await svc.store.jobs.steps(jobs[1].id)


async def _wait_status(svc: Service, event_id: int, status: str, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while True:
            event = await svc.store.events.get(event_id)
            assert event is not None
            if event.status == status and event.replay_mode is None:
                return
            await asyncio.sleep(0.02)


async def test_failed_event_keeps_error_and_ssh_tails_then_resume_continues_at_the_failed_step(
    rig: Rig,
) -> None:
    secret = f"pw-{uid()}"
    svc, event, body = await rig.failed_event(secret=secret)

    out = cli("failed", "list", "--format", "json", "--database", rig.db_url)
    assert out.returncode == 0, out.stderr
    (item,) = json.loads(out.stdout)
    assert item["id"] == event.id and item["failedStep"] == "install"
    assert item["errorClass"] == "ssh-command-failed" and item["attempts"] == 1
    assert "port 6443 is in use" in item["lastError"]
    # The filters select it or not.
    for flt, hits in (
        (["--instance", body["vnfInstanceId"]], 1),
        (["--instance", uid()], 0),
        (["--operation", "instantiate", "--state", "COMPLETED"], 1),
        (["--operation", "HEAL"], 0),
        (["--error-class", "ssh-command-failed", "--since", "1h"], 1),
        (["--until", "1h"], 0),
    ):
        out = cli("failed", "list", "--format", "json", "--database", rig.db_url, *flt)
        assert out.returncode == 0, out.stderr
        assert len(json.loads(out.stdout)) == hits, flt

    shown = cli("failed", "show", str(event.id), "--database", rig.db_url)
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    (job,) = detail["jobs"]
    install = next(s for s in job["steps"] if s["name"] == "install")
    assert "--- stderr (tail) ---" in install["output"]
    assert "port 6443 is in use" in install["output"]
    assert "--- stdout (tail) ---" in install["output"]
    assert secret not in shown.stdout

    rig.fault.unlink()  # the operator fixed the node
    out = cli("replay", str(event.id), "--yes", "--database", rig.db_url)
    assert out.returncode == 0, out.stderr
    assert "queued 1 event(s) for replay (mode resume" in out.stdout
    await _wait_status(svc, event.id, "done")

    assert rig.started() == Counter({"discover": 1, "install": 2, "token": 1})
    failed, steps = await _failed_then_replayed(svc, event.id, "resume")
    assert [(s.name, s.status) for s in steps] == [
        ("discover", "done"),
        ("install", "done"),
        ("token", "done"),
    ]
    # The failed job stays as the record of what went wrong.
    old = await svc.store.jobs.steps(failed.id)
    assert [(s.name, s.status) for s in old] == [("discover", "done"), ("install", "failed")]

    audit = cli("audit", "list", "--format", "json", "--database", rig.db_url)
    (row,) = json.loads(audit.stdout)
    assert row["actor"] == getpass.getuser() and row["action"] == "replay"
    assert row["mode"] == "resume" and row["dryRun"] is False
    assert row["eventIds"] == [event.id] and row["detail"]["state"] == "done"
    table = cli("audit", "list", "--database", rig.db_url)
    assert "resume" in table.stdout and getpass.getuser() in table.stdout


async def test_dry_run_prints_the_plan_and_changes_nothing(rig: Rig) -> None:
    svc, event, body = await rig.failed_event()
    # The instance moves on: a later op-occ (HEAL) for the same VNF instance.
    rig.fault.unlink()
    later = op_occ(instance=body["vnfInstanceId"], operation="HEAL", state="COMPLETED")
    await rig.post(svc, later)
    await wait_settled(svc, 2)
    await wait_lanes_idle(rig.http, svc)

    # (Leases are the running serve's own bookkeeping: a lane lets its lease
    # go a moment after its last event settles.)
    before = _dump(rig.db_url, skip=("audit", "leases"))
    env = handler_env(rig.fault, rig.runs_file)
    out = cli("replay", str(event.id), "--dry-run", "--database", rig.db_url, env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"event {event.id}: INSTANTIATE COMPLETED" in text
    assert "handler: operate-test  mode: resume" in text
    assert "plan: discover, install, token" in text
    assert "already done, would be skipped: discover" in text
    assert "would run: install, token" in text
    assert f"instance has moved on since: {later['vnfLcmOpOccId']} (HEAL COMPLETED" in text
    assert "nothing changed" in text

    out = cli(
        "replay",
        "--all",
        "--dry-run",
        "--mode",
        "anew",
        "--format",
        "json",
        "--database",
        rig.db_url,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    (preview,) = json.loads(out.stdout)
    assert preview["skippedDone"] == [] and preview["wouldRun"] == ["discover", "install", "token"]
    assert preview["instanceMovedOn"] is True

    assert _dump(rig.db_url, skip=("audit", "leases")) == before, "a dry run changed the store"
    audit = json.loads(cli("audit", "list", "--format", "json", "--database", rig.db_url).stdout)
    assert [(a["dryRun"], a["mode"], a["eventIds"]) for a in audit] == [
        (True, "anew", [event.id]),
        (True, "resume", [event.id]),
    ]
    assert (await svc.store.events.get(event.id)).status == "failed"  # type: ignore[union-attr]


async def test_anew_runs_every_step_again(rig: Rig) -> None:
    svc, event, _ = await rig.failed_event()
    rig.fault.unlink()
    out = cli("replay", str(event.id), "--mode", "anew", "--yes", "--database", rig.db_url)
    assert out.returncode == 0, out.stderr
    await _wait_status(svc, event.id, "done")
    assert rig.started() == Counter({"discover": 2, "install": 2, "token": 1})
    _, steps = await _failed_then_replayed(svc, event.id, "anew")
    assert [(s.name, s.attempts) for s in steps] == [("discover", 1), ("install", 1), ("token", 1)]


async def test_replay_refuses_without_yes_when_stdin_is_not_a_terminal(rig: Rig) -> None:
    _, event, _ = await rig.failed_event()
    before = _dump(rig.db_url, skip=("leases",))
    out = cli("replay", str(event.id), "--database", rig.db_url)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "lccn-subscriber: error: refusing to replay 1 event(s) without --yes "
        "(stdin is not a terminal)"
    )
    assert _dump(rig.db_url, skip=("leases",)) == before
    out = cli("replay", "--database", rig.db_url)
    assert out.returncode == 2 and "give ids, a filter" in out.stderr
    out = cli("replay", "999999", "--yes", "--database", rig.db_url)
    assert out.returncode == 2 and "no event with id 999999" in out.stderr


async def test_replay_and_live_events_of_one_instance_never_overlap(rig: Rig) -> None:
    svc, event, body = await rig.failed_event(step_seconds=0.05)
    rig.fault.unlink()
    instance = body["vnfInstanceId"]
    # Replay while live events of the same instance keep arriving.
    replay = asyncio.create_task(
        asyncio.to_thread(cli, "replay", str(event.id), "--yes", "--database", rig.db_url)
    )
    for operation in ("HEAL", "SCALE", "HEAL"):
        occ = uid()
        for state in ("STARTING", "PROCESSING", "COMPLETED"):
            await rig.post(
                svc,
                op_occ(instance=instance, op_occ_id=occ, operation=operation, state=state),
            )
        await asyncio.sleep(0.05)
    out = await replay
    assert out.returncode == 0, out.stderr
    await _wait_status(svc, event.id, "done")
    await wait_settled(svc, 10)

    running: set[int] = set()
    for job, _, _, what, inst in runs(rig.runs_file):
        assert inst == instance
        if what == "start":
            assert not running - {job}, f"job {job} started while {running} ran"
            running.add(job)
        else:
            running.discard(job)
    # The replayed job ran completely.
    jobs = await svc.store.jobs.for_event(event.id)
    assert jobs[-1].mode == "resume" and jobs[-1].status == "done"


async def test_a_replayed_transition_is_not_stale_although_its_op_occ_moved_on(rig: Rig) -> None:
    svc = await rig.start()
    occ, instance = uid(), uid()
    await rig.post(svc, op_occ(instance=instance, op_occ_id=occ, state="PROCESSING"))
    await wait_settled(svc, 1)
    rig.fault.unlink()
    await rig.post(svc, op_occ(instance=instance, op_occ_id=occ, state="COMPLETED"))
    events = await wait_settled(svc, 2)
    processing = next(e for e in events if e.operation_state == "PROCESSING")
    assert processing.status == "failed"
    out = cli("replay", str(processing.id), "--yes", "--database", rig.db_url)
    assert out.returncode == 0, out.stderr
    await _wait_status(svc, processing.id, "done")


async def test_batch_replay_by_filter_is_paced_and_shows_progress(rig: Rig) -> None:
    svc = await rig.start()
    instances = [uid() for _ in range(3)]
    for instance in instances:
        await rig.post(svc, op_occ(instance=instance, operation="HEAL", state="COMPLETED"))
    events = await wait_settled(svc, 3)
    assert {e.status for e in events} == {"failed"}
    rig.fault.unlink()
    out = cli("replay", "--operation", "HEAL", "--rate", "10/s", "--yes", "--database", rig.db_url)
    assert out.returncode == 0, out.stderr
    progress = [line for line in out.stderr.splitlines() if line.startswith("replay [")]
    assert [line.split("] ")[1].split()[0] for line in progress] == ["1/3", "2/3", "3/3"]
    for e in events:
        await _wait_status(svc, e.id, "done")
    (row,) = json.loads(cli("audit", "list", "--format", "json", "--database", rig.db_url).stdout)
    assert row["eventIds"] == sorted(e.id for e in events)
    assert row["detail"]["filters"] == {"operation": "HEAL"} and row["detail"]["rate"] == "10/s"
