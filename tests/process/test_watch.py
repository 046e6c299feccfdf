"""``lccn-subscriber events watch``: another process follows events and steps as serve runs them."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import aiohttp

from subscriber.kernel import RoutingTable
from tests import REPO
from tests.conftest import ServiceFactory, callback_url
from tests.factories import op_occ
from tests.operate_handler import OperateHandler
from tests.programs import program_env


async def test_watch_shows_each_event_its_steps_and_its_outcome(
    start_service: ServiceFactory, http: aiohttp.ClientSession, db_url: str, tmp_path: Path
) -> None:
    fault = tmp_path / "fault"
    registry = RoutingTable()
    registry.register(OperateHandler(fault, tmp_path / "runs", step_seconds=0.3))
    svc = await start_service(routing=registry)
    watcher = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subscriber.cli", "events", "watch", "--until-idle",
        "--format", "json", "--interval", "0.1", "--database", db_url,
        cwd=REPO, env=program_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert watcher.stdout is not None
        first = json.loads(await asyncio.wait_for(watcher.stdout.readline(), 60))
        assert first["kind"] == "watching"  # it has looked once: only newer events from now on
        fault.touch()  # the install step fails for good
        inst = "watch-" + os.urandom(4).hex()
        ok = op_occ(instance=inst, state="COMPLETED")
        async with http.post(callback_url(svc), json=ok) as resp:
            assert resp.status == 204
        out, err = await asyncio.wait_for(watcher.communicate(), 60)
    finally:
        if watcher.returncode is None:
            watcher.kill()
            await watcher.wait()
    assert watcher.returncode == 0, err.decode()
    records = [json.loads(line) for line in out.decode().splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "event" and kinds[-1] == "settled", kinds
    assert records[0]["vnfInstanceId"] == inst and records[0]["operationState"] == "COMPLETED"
    steps = [(r["step"], r["status"]) for r in records if r["kind"] == "step"]
    assert steps[0] == ("discover", "done")
    assert ("install", "failed") in steps
    assert all(r["seconds"] is not None for r in records if r["kind"] == "step")
    assert records[-1]["status"] == "failed" and "install" in records[-1]["error"]
    assert "port 6443 is in use" in next(r["error"] for r in records if r.get("step") == "install")


def test_text_lines_name_step_node_and_duration() -> None:
    from subscriber.watch import format_record

    line = format_record(
        {
            "kind": "step",
            "eventId": 7,
            "jobId": 3,
            "handler": "cluster-scale",
            "step": "join-workers",
            "status": "done",
            "seconds": 2.5,
            "node": "worker12, worker13",
            "error": None,
        }
    )
    assert "event     7" in line and "join-workers" in line and "done 2.50s" in line
    assert line.endswith("worker12, worker13")
