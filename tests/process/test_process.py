"""``lccn-subscriber serve`` as a real process: SIGKILL mid-stream, SIGTERM drain."""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import free_port
from tests.factories import op_occ, uid
from tests.programs import ServeProcess, alive, gone, tree

TERMINAL = {"done", "failed", "ignored", "stale"}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeProcess]:
    effects = tmp_path / "side_effects.txt"
    effects.touch()
    proc = ServeProcess(
        tmp_path,
        free_port(),
        {
            "LCCN_HANDLERS__MODULES": json.dumps(["tests.crash_handler"]),
            "LCCN_TEST_SIDE_EFFECTS": str(effects),
            "LCCN_DISPATCH__RESCAN_INTERVAL": "0.5",
            "LCCN_DISPATCH__REORDER_WINDOW": "0.05",
        },
    )
    yield proc
    proc.kill()


async def _wait_terminal(
    serve: ServeProcess, expected: int, timeout: float = 60
) -> list[tuple[object, ...]]:
    async with asyncio.timeout(timeout):
        while True:
            rows = serve.rows("SELECT id, status FROM events")
            if len(rows) >= expected and all(r[1] in TERMINAL for r in rows):
                return rows
            await asyncio.sleep(0.1)


@pytest.mark.asyncio
async def test_sigkill_mid_stream_loses_nothing_and_never_reruns_a_side_effect(
    serve: ServeProcess,
) -> None:
    serve.env["LCCN_TEST_STEP_SECONDS"] = "0.1"
    serve.start()
    await serve.ready()
    instances = [uid() for _ in range(60)]
    bodies = [
        op_occ(instance=inst, state=state, op_occ_id=occ)
        for inst in instances
        for occ in [uid()]
        for state in ("STARTING", "PROCESSING", "COMPLETED")
    ]
    acked: list[str] = []
    killed = asyncio.Event()

    async def sender(http: aiohttp.ClientSession, chunk: list[dict[str, object]]) -> None:
        for n, body in enumerate(chunk):
            if n == len(chunk) - 1:
                # However fast ingest is against the worker, part of the stream
                # is still to come when the kill lands.
                await killed.wait()
            try:
                async with http.post(serve.url, json=body) as resp:
                    if resp.status == 204:
                        acked.append(f"{body['vnfLcmOpOccId']}|{body['operationState']}")
            except aiohttp.ClientError:
                return  # the server died under us
            await asyncio.sleep(0.03)  # paced, so posts are in flight at the kill

    async with aiohttp.ClientSession() as http:
        senders = [asyncio.create_task(sender(http, bodies[i::8])) for i in range(8)]
        # Kill while events are arriving and side-effect steps are running.
        async with asyncio.timeout(30):
            while len(Path(serve.env["LCCN_TEST_SIDE_EFFECTS"]).read_text().splitlines()) < 10:
                await asyncio.sleep(0.01)
        assert serve.proc is not None
        pids = tree(serve.proc.pid)
        serve.kill(signal.SIGKILL)
        killed.set()
        await gone(pids)  # no orphan worker goes on running jobs
        await asyncio.gather(*senders)
    assert 0 < len(acked) < len(bodies), "the kill should land mid-stream"

    serve.start()
    await serve.ready()
    rows = await _wait_terminal(serve, len(acked))

    stored = {
        f"{occ}|{state}"
        for occ, state in serve.rows("SELECT vnf_lcm_op_occ_id, operation_state FROM events")
    }
    assert set(acked) <= stored, "an acknowledged event was lost"
    assert len(rows) == len(stored)  # no duplicates
    effects = Path(serve.env["LCCN_TEST_SIDE_EFFECTS"]).read_text().split("\n")
    per_job = Counter(line.split()[0] for line in effects if line)
    assert per_job and max(per_job.values()) == 1, "a non-idempotent step ran twice in one job"
    per_event = Counter(line.split()[1] for line in effects if line)
    assert max(per_event.values()) == 1
    # A job cut off inside the side effect is failed as interrupted, not re-run.
    interrupted = serve.rows("SELECT COUNT(*) FROM jobs WHERE error_class = 'interrupted'")[0][0]
    failed = serve.rows("SELECT COUNT(*) FROM events WHERE status = 'failed'")[0][0]
    assert failed == interrupted
    done = serve.rows("SELECT COUNT(*) FROM events WHERE status = 'done'")[0][0]
    assert done + failed + serve.rows(
        "SELECT COUNT(*) FROM events WHERE status IN ('stale', 'ignored')"
    )[0][0] == len(rows)


async def _inside_the_side_effect(
    serve: ServeProcess, http: aiohttp.ClientSession, step_seconds: str, graceful_timeout: str
) -> None:
    """Start serve with steps of ``step_seconds`` and ``graceful_timeout``, post one event and
    return once its non-idempotent ``side_effect`` step has begun."""
    serve.env["LCCN_TEST_STEP_SECONDS"] = step_seconds
    serve.env["LCCN_DISPATCH__GRACEFUL_TIMEOUT"] = graceful_timeout
    serve.start()
    await serve.ready()
    async with http.post(serve.url, json=op_occ(state="STARTING")) as resp:
        assert resp.status == 204
    async with asyncio.timeout(10):
        while not Path(serve.env["LCCN_TEST_SIDE_EFFECTS"]).read_text():
            await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_sigterm_stops_intake_and_lets_the_running_step_finish(serve: ServeProcess) -> None:
    async with aiohttp.ClientSession() as http:
        await _inside_the_side_effect(serve, http, step_seconds="1.5", graceful_timeout="10")
        assert serve.proc is not None
        pids = tree(serve.proc.pid)
        serve.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        with pytest.raises(aiohttp.ClientError):
            async with http.post(serve.url, json=op_occ()):
                pass
    assert serve.proc.wait(20) == 0
    assert not [p for p in pids if alive(p)], "the worker outlived serve's SIGTERM"
    assert serve.rows("SELECT status FROM events") == [("done",)]
    assert serve.rows("SELECT name, status FROM steps ORDER BY idx") == [
        ("prepare", "done"),
        ("side_effect", "done"),
        ("finish", "done"),
    ]


@pytest.mark.asyncio
async def test_sigterm_past_the_grace_period_leaves_work_resumable(serve: ServeProcess) -> None:
    async with aiohttp.ClientSession() as http:
        await _inside_the_side_effect(serve, http, step_seconds="30", graceful_timeout="0.5")
    assert serve.proc is not None
    serve.proc.send_signal(signal.SIGTERM)
    assert serve.proc.wait(20) == 0
    assert serve.rows("SELECT status FROM events") == [("running",)]
    assert serve.rows("SELECT name, status FROM steps ORDER BY idx") == [
        ("prepare", "done"),
        ("side_effect", "running"),
    ]
    # Next start: the interrupted non-idempotent step is not re-run; the job waits for an operator.
    serve.env["LCCN_TEST_STEP_SECONDS"] = "0.01"
    serve.start()
    await serve.ready()
    rows = await _wait_terminal(serve, 1)
    assert rows[0][1] == "failed"
    assert len(Path(serve.env["LCCN_TEST_SIDE_EFFECTS"]).read_text().splitlines()) == 1
