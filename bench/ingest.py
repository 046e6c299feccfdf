"""Ingest benchmark: our ``serve`` (SQLite, real commits) against a no-op 204 server.

Both servers run as separate processes and get the same load from this
process: 64 concurrent senders posting valid notifications with distinct
op-occs over keep-alive connections. Then our server is driven at half of its
measured maximum rate to read its latency when not saturated.

Our server also runs the job of every event it stores (the built-in ``log``
handler: a job row, a step checkpoint, a lease), which competes with ingest
for the one process. So latency is read twice, each time after the job
backlog of the previous phase has drained:

* at half of the measured ingest maximum (the issue's figure): faster than
  jobs can follow, so a backlog builds up during the phase;
* at a rate the jobs sustain (80 % of the measured drain rate): steady state.

Prints throughput and p50/p99 latency of both servers, both paced latencies,
and as the last line ``ratio=<ours/no-op throughput>``.

Usage: python bench/ingest.py [--requests N] [--concurrency C]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
PATH = "/lccn/notifications"

NOOP_SERVER = """
import sys
from aiohttp import web

async def post(request):
    await request.read()
    return web.Response(status=204)

async def get(request):
    return web.Response(status=204)

app = web.Application()
app.router.add_post(sys.argv[2], post)
app.router.add_get(sys.argv[2], get)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def body(i: int) -> bytes:
    inst, occ, sub = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
    base = "http://127.0.0.1:9890/vnflcm/v2"
    return json.dumps(
        {
            "id": str(uuid.uuid4()),
            "notificationType": "VnfLcmOperationOccurrenceNotification",
            "subscriptionId": sub,
            "timeStamp": "2026-11-22T03:50:00Z",
            "notificationStatus": "RESULT",
            "operationState": "COMPLETED",
            "vnfInstanceId": inst,
            "operation": "INSTANTIATE",
            "isAutomaticInvocation": False,
            "vnfLcmOpOccId": occ,
            "verbosity": "FULL",
            "affectedVnfcs": [
                {
                    "id": str(uuid.uuid4()),
                    "vduId": "workerNode" if i % 2 else "masterNode",
                    "changeType": "ADDED",
                    "computeResource": {"resourceId": str(uuid.uuid4())},
                    "metadata": {"stack_id": str(uuid.uuid4())},
                }
            ],
            "_links": {
                "vnfInstance": {"href": f"{base}/vnf_instances/{inst}"},
                "subscription": {"href": f"{base}/subscriptions/{sub}"},
                "vnfLcmOpOcc": {"href": f"{base}/vnf_lcm_op_occs/{occ}"},
            },
        }
    ).encode()


async def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}")
            try:
                async with http.get(url) as resp:
                    if resp.status == 204:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("server did not become ready")


async def saturate(url: str, bodies: list[bytes], concurrency: int) -> tuple[float, list[float]]:
    """Closed loop: ``concurrency`` senders, each posting as fast as answers come back."""
    queue = list(reversed(bodies))
    latencies: list[float] = []
    headers = {"Content-Type": "application/json", "Version": "2.0.0"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def sender() -> None:
            while queue:
                data = queue.pop()
                t = time.perf_counter()
                async with http.post(url, data=data, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 204:
                        raise RuntimeError(f"unexpected status {resp.status}")
                latencies.append(time.perf_counter() - t)

        start = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return len(bodies) / elapsed, latencies


async def paced(
    url: str, bodies: list[bytes], rate: float, concurrency: int
) -> tuple[float, list[float]]:
    """Open loop at ``rate`` requests/s spread over ``concurrency`` senders."""
    latencies: list[float] = []
    headers = {"Content-Type": "application/json", "Version": "2.0.0"}
    interval = 1.0 / rate
    start = time.perf_counter() + 0.05
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def sender(offset: int) -> None:
            for k in range(offset, len(bodies), concurrency):
                due = start + k * interval
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                t = time.perf_counter()
                async with http.post(url, data=bodies[k], headers=headers) as resp:
                    await resp.read()
                latencies.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        await asyncio.gather(*(sender(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return len(bodies) / elapsed, latencies


async def drain(url: str, timeout: float = 60.0) -> float:
    """Wait until the server has no open event; return the seconds it took."""
    metrics = url.rsplit("/", 2)[0] + "/metrics"
    start = time.perf_counter()
    async with aiohttp.ClientSession() as http:
        while time.perf_counter() - start < timeout:
            async with http.get(metrics) as resp:
                text = await resp.text()
            open_events = sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("lccn_queue_depth{")
            )
            if open_events == 0:
                return time.perf_counter() - start
            await asyncio.sleep(0.2)
    raise RuntimeError("job backlog did not drain")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="lccn-bench-"))
    noop_port, our_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    noop = subprocess.Popen(
        [sys.executable, "-c", NOOP_SERVER, str(noop_port), PATH],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ours = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "subscriber.cli",
            "serve",
            "--port",
            str(our_port),
            "--database",
            f"sqlite+aiosqlite:///{tmp / 'bench.db'}",
        ],
        env={**env, "LCCN_LOG__LEVEL": "WARNING"},
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        noop_url = f"http://127.0.0.1:{noop_port}{PATH}"
        our_url = f"http://127.0.0.1:{our_port}{PATH}"
        await wait_ready(noop_url, noop)
        await wait_ready(our_url, ours)
        warm = [body(i) for i in range(300)]
        await saturate(noop_url, warm, args.concurrency)
        await saturate(our_url, [body(i) for i in range(300)], args.concurrency)

        noop_rate, noop_lat = await saturate(
            noop_url, [body(i) for i in range(args.requests)], args.concurrency
        )
        our_rate, our_lat = await saturate(
            our_url, [body(i) for i in range(args.requests)], args.concurrency
        )
        backlog = await drain(our_url)
        job_rate = args.requests / backlog if backlog > 0 else float("inf")
        half = our_rate / 2
        half_n = max(500, int(half * 3))  # about three seconds of paced load
        half_rate, half_lat = await paced(
            our_url, [body(i) for i in range(half_n)], half, args.concurrency
        )
        await drain(our_url)
        steady = min(half, job_rate * 0.8)
        steady_n = max(300, int(steady * 3))
        steady_rate, steady_lat = await paced(
            our_url, [body(i) for i in range(steady_n)], steady, args.concurrency
        )
    finally:
        for proc in (noop, ours):
            proc.terminate()
        for proc in (noop, ours):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()

    print(f"requests={args.requests} concurrency={args.concurrency}")
    print(
        f"noop: {noop_rate:.0f} req/s p50={pct(noop_lat, 50):.2f}ms p99={pct(noop_lat, 99):.2f}ms"
    )
    print(
        f"ours: {our_rate:.0f} req/s p50={pct(our_lat, 50):.2f}ms p99={pct(our_lat, 99):.2f}ms "
        "(SQLite WAL, synchronous=FULL, group commit)"
    )
    print(
        f"ours at half max ({half:.0f} req/s target, {half_rate:.0f} achieved): "
        f"p50={pct(half_lat, 50):.2f}ms p99={pct(half_lat, 99):.2f}ms "
        f"mean={statistics.mean(half_lat) * 1000:.2f}ms"
    )
    print(
        f"ours at a rate its jobs sustain ({steady:.0f} req/s target, {steady_rate:.0f} achieved; "
        f"jobs drained at ~{job_rate:.0f}/s): p50={pct(steady_lat, 50):.2f}ms "
        f"p99={pct(steady_lat, 99):.2f}ms"
    )
    print(f"ratio={our_rate / noop_rate:.3f}")


if __name__ == "__main__":
    asyncio.run(main())
