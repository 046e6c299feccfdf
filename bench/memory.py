#!/usr/bin/env python3
"""Memory of ``lccn-subscriber serve``: resident set with a large backlog, and after it.

Starts ``serve`` as a subprocess with the production defaults (SQLite file
store, synchronous=FULL; or ``--database`` PostgreSQL) and no Tacker, so every
transition goes to the built-in ``log`` handler (a job row, a step checkpoint,
a lease per event). Then posts ``--events`` notifications over HTTP spread
over ``--instances`` VNF instances (lanes), each instance getting the same
life: INSTANTIATE, SCALE and HEAL (STARTING, PROCESSING, COMPLETED each), then
TERMINATE STARTING, repeated if more events per instance are asked for. They
are posted round by round (every instance's first transition, then every
instance's second ...), 64 at a time.

Reads the server's resident memory at start, once every event is stored (the
204s are in; most jobs still wait), and once the backlog is worked off. ``serve``
is two processes by default (ingest, and the worker it forks, which runs the
jobs and shares the start-up heap with it copy-on-write): each reading is the
resident memory of the two together, every physical page counted once
(``/proc/PID/pagemap``; the sum of PSS where page frames cannot be read). The
RSS of each process and their plain sum (which counts every shared page twice)
and the peaks (VmHWM) are printed beside it. The last line is
``rss_mb=<the larger of the two readings>``.

    python bench/memory.py [--events 10000] [--instances 1000] [--role all|single]
    [--database URL]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
from benchlib import (
    HEADERS,
    PATH,
    add_database_argument,
    backend_name,
    drain,
    durability,
    free_port,
    machine,
    notification,
    open_events,
    process_tree,
    rss_mb,
    scratch_database,
    serve,
    tree_resident_mb,
    wait_ready,
)

LIFE = [
    (operation, state)
    for operation in ("INSTANTIATE", "SCALE", "HEAL")
    for state in ("STARTING", "PROCESSING", "COMPLETED")
] + [("TERMINATE", "STARTING")]


def rounds(events: int, instances: int) -> list[list[bytes]]:
    """The bodies to post, one list per round; every instance once per round."""
    names = [str(uuid.uuid4()) for _ in range(instances)]
    occs: dict[tuple[str, int, int], str] = {}
    out: list[list[bytes]] = []
    for k in range(-(-events // instances)):
        operation, state = LIFE[k % len(LIFE)]
        batch = []
        for inst in names[: min(instances, events - k * instances)]:
            occ = occs.setdefault((inst, k // len(LIFE), k % len(LIFE) // 3), str(uuid.uuid4()))
            vnfcs = 1 if state == "COMPLETED" else 0
            batch.append(notification(inst, occ, operation, state, vnfcs=vnfcs))
        out.append(batch)
    return out


async def post_all(url: str, bodies: list[bytes], concurrency: int) -> None:
    queue = list(reversed(bodies))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def sender() -> None:
            while queue:
                data = queue.pop()
                async with http.post(url, data=data, headers=HEADERS) as resp:
                    if resp.status != 204:
                        raise RuntimeError(f"unexpected status {resp.status}")

        await asyncio.gather(*(sender() for _ in range(concurrency)))


def tree_rss(pid: int) -> tuple[float, float]:
    """(resident memory of ``serve`` and its worker together, sum of their peaks), in MB;
    prints each process and the plain RSS sum."""
    pids = process_tree(pid)
    readings = [(p, *rss_mb(p)) for p in pids]
    together, summed = tree_resident_mb(pids)
    print(
        "  "
        + ", ".join(f"pid {p}: RSS {now:.1f} MB (peak {top:.1f})" for p, now, top in readings)
        + (f"; RSS summed {summed:.1f} MB, together {together:.1f} MB" if len(pids) > 1 else "")
    )
    return together, sum(r[2] for r in readings)


async def main(events: int, instances: int, server: str, concurrency: int, role: str) -> int:
    print(
        f"resident memory of `lccn-subscriber serve --role {role}` (production defaults, log "
        "handler; its processes together, each physical page once) "
        f"with {events:,} events over {instances:,} instances (lanes), posted over HTTP "
        f"by {concurrency} senders"
    )
    print(f"store: {await durability(server)}")
    print(
        f"processes: serve ({2 if role == 'all' else 1}) + this one (load)"
        + ("" if backend_name(server) == "SQLite" else " + the PostgreSQL server")
    )
    print(machine())
    with tempfile.TemporaryDirectory(prefix="lccn-bench-") as tmp:
        async with scratch_database(server, Path(tmp), "memory") as database:
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            with serve(database, port, "--role", role) as proc:
                await wait_ready(base + PATH, proc)
                idle, _ = tree_rss(proc.pid)
                print(f"started: {idle:.1f} MB")
                started = time.perf_counter()
                for batch in rounds(events, instances):
                    await post_all(base + PATH, batch, concurrency)
                posted = time.perf_counter() - started
                stored, _ = tree_rss(proc.pid)
                backlog = await open_events(base)
                print(
                    f"all {events:,} stored ({posted:.1f} s, {events / posted:,.0f}/s), "
                    f"{backlog:,} still open: {stored:.1f} MB"
                )
                took = await drain(base, within=600)
                after, peak = tree_rss(proc.pid)
                print(
                    f"backlog worked off ({took:.1f} s more, {posted + took:.1f} s in all): "
                    f"{after:.1f} MB; peaks summed {peak:.1f} MB"
                )
                if proc.poll() is not None:
                    print(f"error: serve exited with {proc.returncode}", file=sys.stderr)
                    return 1
    larger = "backlog stored" if stored >= after else "worked off"
    print(f"(rss_mb is the larger reading: {larger})")
    print(f"rss_mb={max(stored, after):.1f}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--instances", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--role",
        choices=("all", "single"),
        default="all",
        help="serve's --role: all (the default: ingest + the worker it forks) or single",
    )
    add_database_argument(parser)
    args = parser.parse_args()
    sys.exit(
        asyncio.run(main(args.events, args.instances, args.database, args.concurrency, args.role))
    )
