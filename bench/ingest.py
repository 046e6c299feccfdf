#!/usr/bin/env python3
"""Ingest benchmark: our ``serve`` (production defaults, jobs running) against the durable floor.

Each server runs alone as its own process, one after the other, and gets the
same load from this process: 64 concurrent senders posting valid
notifications with distinct op-occs over keep-alive connections.
Every request is the STARTING notification of a new op-occ of a new instance
(one lane each), FULL verbosity with one VNFC (about 1 KB).

* no-op: an aiohttp app that reads the body and answers 204; warmed up, timed,
  stopped before ours starts.
* floor, the baseline (``bench/http_floor.py``): the least a server can do and
  still store every notification durably: aiohttp, JSON decode into the events
  row our store writes, group commit into the events table alone (same schema,
  indexes and durability), 204 after the commit. Timed at its maximum and at
  half of it, alone like the others.
* ours: ``lccn-subscriber serve`` (SQLite file, synchronous=FULL, or
  ``--database`` PostgreSQL), every event's job run by the built-in ``log``
  handler (a job row, a step checkpoint, a lease), as in production: in serve's
  worker process (``--role all``, the default: ingest in one process, jobs in the
  worker it forks, at a lower CPU priority) or in the same process (``--role single``).
  Warmed up, then the warm-up's jobs are worked off before the timed phase
  starts, so no earlier backlog takes CPU from it.

Then our server is driven open-loop at half of its measured maximum (the
issue's latency figure), and at a rate its jobs sustain (80 % of the measured
drain rate), each after the previous backlog is worked off; and an idle phase
posts one event at a time, 20 ms apart.

Dispatch latency (issue 16: the 204 to the handler's first step) is read from
the store afterwards: from the event's ``received_at`` (its append began; the
204 follows the commit) to ``started_at`` of the first step of its first job.

Also timed: ours at half *the floor's* maximum rate, whose p99 is set against the
floor's own p99 at that rate (issue 31: at most 1.5 times).

Also read from ``/proc`` while the floor and ours are saturated: the CPU each of their
processes (ours: ingest and its worker) and the load generator used a request.

Prints throughput and p50/p99 latency of the three servers (the no-op's as context),
the paced latencies, dispatch latencies per phase, and as the last line
``ratio=<ours/floor throughput>``.

Usage: python bench/ingest.py [--requests N] [--concurrency C] [--role all|single]
[--database URL]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import AbstractContextManager
from pathlib import Path

import aiohttp
from benchlib import (
    HEADERS,
    PATH,
    add_database_argument,
    backend_name,
    cpu_seconds,
    drain,
    durability,
    free_port,
    machine,
    notification,
    process_tree,
    scratch_database,
    serve,
    server_process,
    wait_ready,
)
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from subscriber.config import DatabaseSettings

FLOOR = Path(__file__).with_name("http_floor.py")

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


def body(i: int) -> bytes:
    """The STARTING notification of a new instance's op-occ (its own lane), one VNFC listed.

    STARTING: the first transition of an op-occ runs at once, so dispatch
    latency is not the reorder window (a COMPLETED whose earlier states were
    not seen waits ``dispatch.reorder_window``, 0.3 s, for them).
    """
    return notification(str(uuid.uuid4()), str(uuid.uuid4()), state="STARTING", vnfcs=1)


def noop_server(port: int) -> AbstractContextManager[subprocess.Popen[bytes]]:
    return server_process([sys.executable, "-c", NOOP_SERVER, str(port), PATH])


async def saturate(url: str, bodies: list[bytes], concurrency: int) -> tuple[float, list[float]]:
    """Closed loop: ``concurrency`` senders, each posting as fast as answers come back."""
    queue = list(reversed(bodies))
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def sender() -> None:
            while queue:
                data = queue.pop()
                t = time.perf_counter()
                async with http.post(url, data=data, headers=HEADERS) as resp:
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
                async with http.post(url, data=bodies[k], headers=HEADERS) as resp:
                    await resp.read()
                    if resp.status != 204:
                        raise RuntimeError(f"unexpected status {resp.status}")
                latencies.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        await asyncio.gather(*(sender(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - t0
    return len(bodies) / elapsed, latencies


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile of ``values`` (seconds), in ms."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


def spread(values: list[float]) -> str:
    return f"p50={pct(values, 50):.2f}ms p99={pct(values, 99):.2f}ms"


# Each event's dispatch latency: received (append began) -> its first job's first step.
DISPATCH = text(
    """
    SELECT e.received_at, s.started_at - e.received_at
    FROM events e
    JOIN jobs j ON j.id = (SELECT min(id) FROM jobs WHERE event_id = e.id)
    JOIN steps s ON s.job_id = j.id AND s.idx = 0
    WHERE s.started_at IS NOT NULL
    """
)


async def dispatch_latencies(database: str) -> list[tuple[float, float]]:
    """(received_at, seconds to the first step) of every event that has a first step."""
    engine = create_async_engine(database)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(DISPATCH)).all()
    finally:
        await engine.dispose()
    return [(float(r[0]), float(r[1])) for r in rows]


def floor_server(port: int, database: str) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """bench/http_floor.py on ``port``, storing into ``database`` (a fresh one)."""
    synchronous = DatabaseSettings().sqlite_synchronous
    return server_process([sys.executable, str(FLOOR), str(port), PATH, database, synchronous])


async def saturate_counted(
    url: str, bodies: list[bytes], concurrency: int, pids: list[int]
) -> tuple[float, list[float], list[float]]:
    """:func:`saturate`, and the CPU each of ``pids`` and this process (the load, last)
    used a request meanwhile, in µs."""
    before = [cpu_seconds(pid) for pid in pids] + [time.process_time()]
    rate, latencies = await saturate(url, bodies, concurrency)
    after = [cpu_seconds(pid) for pid in pids] + [time.process_time()]
    used = [(b - a) / len(bodies) * 1e6 for a, b in zip(before, after, strict=True)]
    return rate, latencies, used


async def measure_floor(
    requests: int, concurrency: int, server: str, workdir: Path
) -> tuple[float, list[float], list[float], list[float]]:
    """The floor's max req/s and latencies, the CPU a request it and the load used then,
    and its latencies at half that rate."""
    port = free_port()
    url = f"http://127.0.0.1:{port}{PATH}"
    async with scratch_database(server, workdir, "floor") as database:
        with floor_server(port, database) as proc:
            await wait_ready(url, proc)
            await saturate(url, [body(i) for i in range(300)], concurrency)
            rate, latencies, cpu = await saturate_counted(
                url, [body(i) for i in range(requests)], concurrency, [proc.pid]
            )
            half_n = max(500, int(rate / 2 * 3))
            _, half = await paced(url, [body(i) for i in range(half_n)], rate / 2, concurrency)
            return rate, latencies, cpu, half


async def measure_noop(requests: int, concurrency: int) -> tuple[float, list[float]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}{PATH}"
    with noop_server(port) as proc:
        await wait_ready(url, proc)
        await saturate(url, [body(i) for i in range(300)], concurrency)
        return await saturate(url, [body(i) for i in range(requests)], concurrency)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--role",
        choices=("all", "single"),
        default="all",
        help="serve's --role: all (the default: jobs in the worker process it forks) or "
        "single (jobs in the ingest process)",
    )
    add_database_argument(parser)
    args = parser.parse_args()
    n, c = args.requests, args.concurrency

    print(
        f"HTTP ingest, {n} timed requests from {c} concurrent senders (keep-alive), "
        "each server alone"
    )
    layout = {
        "single": "one process: ingest and the log handler's jobs",
        "all": "ingest process + the worker it forks, running the log handler's jobs at nice +10",
    }[args.role]
    print(f"ours: lccn-subscriber serve --role {args.role}, production defaults ({layout})")
    print(f"store: {await durability(args.database)}")
    print(
        f"processes: the server under test (ours: {1 if args.role == 'single' else 2}) "
        "+ this one (load)"
        + ("" if backend_name(args.database) == "SQLite" else " + the PostgreSQL server")
    )
    print(machine())
    noop_rate, noop_lat = await measure_noop(n, c)
    print(f"noop: {noop_rate:.0f} req/s {spread(noop_lat)}")

    with tempfile.TemporaryDirectory(prefix="lccn-bench-") as tmp:
        floor_rate, floor_lat, floor_cpu, floor_half = await measure_floor(
            n, c, args.database, Path(tmp)
        )
        print(
            "context, floor (aiohttp: JSON decode, the events row, group commit, 204 after "
            f"it; bench/http_floor.py): {floor_rate:.0f} req/s {spread(floor_lat)}; "
            f"at half its max {spread(floor_half)}"
        )
        async with scratch_database(args.database, Path(tmp), "ingest") as database:
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            url = base + PATH
            windows: dict[str, tuple[float, float]] = {}
            with serve(database, port, "--role", args.role) as proc:
                await wait_ready(url, proc)
                await saturate(url, [body(i) for i in range(300)], c)
                warm = await drain(base)
                print(f"warm-up: 300 requests, their jobs worked off in {warm:.1f}s")

                our_rate, our_lat, our_cpu = await saturate_counted(
                    url, [body(i) for i in range(n)], c, process_tree(proc.pid)
                )
                print(f"ours: {our_rate:.0f} req/s {spread(our_lat)}")
                print(
                    "context, CPU a request at saturation (/proc): floor "
                    f"{floor_cpu[0]:.0f} µs (the load {floor_cpu[-1]:.0f}); ours "
                    + " + ".join(f"{used:.0f}" for used in our_cpu[:-1])
                    + f" µs ({'ingest + worker' if len(our_cpu) > 2 else 'one process'}; "
                    f"the load {our_cpu[-1]:.0f})"
                )
                print(f"context: ours / no-op = {our_rate / noop_rate:.2f}")
                backlog = await drain(base)
                job_rate = n / backlog if backlog > 0 else float("inf")

                at = floor_rate / 2
                at_rate, at_lat = await paced(
                    url, [body(i) for i in range(max(500, int(at * 3)))], at, c
                )
                p99_ours, p99_floor = pct(at_lat, 99), pct(floor_half, 99)
                print(
                    f"ours at half the floor's max ({at:.0f} req/s target, {at_rate:.0f} "
                    f"achieved): {spread(at_lat)}; p99 / the floor's p99 there = "
                    f"{p99_ours / p99_floor:.2f}"
                )
                await drain(base)

                half = our_rate / 2
                half_n = max(500, int(half * 3))  # about three seconds of paced load
                t0 = time.time()
                half_rate, half_lat = await paced(url, [body(i) for i in range(half_n)], half, c)
                windows["half max"] = (t0, time.time())
                print(
                    f"ours at half max ({half:.0f} req/s target, {half_rate:.0f} achieved): "
                    f"{spread(half_lat)} mean={statistics.mean(half_lat) * 1000:.2f}ms"
                )
                await drain(base)

                steady = min(half, job_rate * 0.8)
                steady_n = max(300, int(steady * 3))
                t0 = time.time()
                steady_rate, steady_lat = await paced(
                    url, [body(i) for i in range(steady_n)], steady, c
                )
                windows["jobs' pace"] = (t0, time.time())
                print(
                    f"ours at a rate its jobs sustain ({steady:.0f} req/s target, "
                    f"{steady_rate:.0f} achieved; jobs drained at ~{job_rate:.0f}/s): "
                    f"{spread(steady_lat)}"
                )
                await drain(base)

                t0 = time.time()
                _, idle_lat = await paced(url, [body(i) for i in range(100)], 50, 1)
                windows["idle"] = (t0, time.time())
                print(f"ours idle (one request at a time, 20 ms apart): {spread(idle_lat)}")
                await drain(base)
            latencies = await dispatch_latencies(database)

    for phase, (start, end) in windows.items():
        values = [d for at, d in latencies if start <= at <= end]
        if values:
            print(f"dispatch latency, {phase} ({len(values)} events): {spread(values)}")
        else:
            print(f"dispatch latency, {phase}: no events found")
    print(f"ratio={our_rate / floor_rate:.3f}")


if __name__ == "__main__":
    asyncio.run(main())
