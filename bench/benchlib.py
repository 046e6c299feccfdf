"""What the benches share: the machine line, and ``--database`` (a scratch store per side).

Not a bench itself. ``python bench/NAME.py`` puts this directory on ``sys.path``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/NAME.py` from a checkout
    sys.path.insert(0, str(ROOT))

__all__ = [
    "HEADERS",
    "PATH",
    "ROOT",
    "add_database_argument",
    "backend_name",
    "drain",
    "durability",
    "free_port",
    "machine",
    "notification",
    "open_events",
    "process_tree",
    "rss_mb",
    "scratch_database",
    "serve",
    "serve_until_terminated",
    "server_process",
    "tree_resident_mb",
    "wait_ready",
]

PATH = "/lccn/notifications"
HEADERS = {"Content-Type": "application/json", "Version": "2.0.0"}


def machine() -> str:
    """CPUs and load, so a reader can judge the figures."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    python = sys.version.split()[0]
    return f"CPUs: {os.cpu_count()} (load average at start: {load}); Python {python}"


def add_database_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database",
        default="",
        metavar="URL",
        help="PostgreSQL server to measure on, e.g. postgresql+asyncpg://postgres@127.0.0.1:5432 "
        "(a fresh database is created on it per measured side and dropped after); "
        "default: a SQLite file in a temporary directory",
    )


def backend_name(url: str) -> str:
    return "SQLite" if not url or make_url(url).get_backend_name() == "sqlite" else "PostgreSQL"


async def durability(url: str, sqlite_synchronous: str = "FULL") -> str:
    """How durable a commit is on this backend, in words (asks a PostgreSQL server)."""
    if backend_name(url) == "SQLite":
        return f"SQLite WAL, synchronous={sqlite_synchronous} (FULL: fsync of the WAL per commit)"
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    conn = await asyncpg.connect(_admin_dsn(url))
    try:
        values = [
            f"{name}={await conn.fetchval(f'SHOW {name}')}"
            for name in ("fsync", "synchronous_commit", "wal_sync_method")
        ]
        version = await conn.fetchval("SHOW server_version")
    finally:
        await conn.close()
    return f"PostgreSQL {version} on this machine, {', '.join(values)}"


def _admin_dsn(server: str) -> str:
    url = make_url(server)
    return url.set(drivername="postgresql", database=url.database or "postgres").render_as_string(
        hide_password=False
    )


@contextlib.asynccontextmanager
async def scratch_database(server: str, workdir: Path, name: str) -> AsyncIterator[str]:
    """A fresh, empty database; yields its SQLAlchemy async URL.

    Arguments:
        server: ``""`` for a SQLite file in ``workdir``, else a PostgreSQL URL
            (its database part, if any, is only used to connect as admin).
        name: tells the scratch databases of one run apart.
    """
    if backend_name(server) == "SQLite":
        yield f"sqlite+aiosqlite:///{workdir / f'{name}.db'}"
        return
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    url = make_url(server)
    dbname = f"lccn_bench_{name}_{uuid.uuid4().hex[:8]}"
    admin_dsn = _admin_dsn(server)
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{dbname}"')
    finally:
        await admin.close()
    try:
        yield url.set(drivername="postgresql+asyncpg", database=dbname).render_as_string(
            hide_password=False
        )
    finally:
        admin = await asyncpg.connect(admin_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        finally:
            await admin.close()


# -- `lccn-subscriber serve` as a subprocess -----------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(database: str, port: int, *args: str, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """``lccn-subscriber serve`` on 127.0.0.1:``port`` with the production defaults.

    Only the listen port, the store and the log level (WARNING: the log handler
    would otherwise write a line per job) are set; ``args`` adds options (``--role``),
    ``env`` settings.
    Stopped with SIGTERM on exit (killed if it does not stop in 15 s).
    """
    argv = [sys.executable, "-m", "subscriber.cli", "serve", "--port", str(port)]
    with server_process(
        [*argv, "--database", database, *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), "LCCN_LOG__LEVEL": "WARNING", **env},
        cwd=ROOT,
    ) as proc:
        yield proc


@contextlib.contextmanager
def server_process(argv: list[str], **popen: Any) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` running, its output discarded; on exit SIGTERM (SIGKILL after 15 s)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **popen)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def wait_ready(url: str, proc: subprocess.Popen[bytes], within: float = 30.0) -> None:
    """Wait until a GET of ``url`` answers 204 (the callback test Tacker sends) and, for
    ``serve``, ``/readyz`` says ready (its worker process runs)."""
    deadline = time.monotonic() + within
    readyz = url.split("/", 3)
    readyz_url = "/".join([*readyz[:3], "readyz"])
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}")
            try:
                async with http.get(url) as resp:
                    callback = resp.status == 204
                async with http.get(readyz_url) as resp:
                    # The no-op server has no /readyz (404): its callback is enough.
                    if callback and resp.status in (200, 404):
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("server did not become ready")


async def open_events(base: str) -> int:
    """Events the server has stored but not finished (pending, running, retry), from /metrics."""
    async with aiohttp.ClientSession() as http, http.get(f"{base}/metrics") as resp:
        text = await resp.text()
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("lccn_queue_depth{")
        )
    )


# serve reads the gauges behind open_events() from its store at most this often
# (subscriber.metrics.Metrics' store_ttl).
METRICS_STORE_TTL = 1.0


async def drain(base: str, within: float = 180.0) -> float:
    """Wait until the server at ``base`` has no open event; return the seconds it took.

    A zero counts only once the gauge may have been read after the call: before
    that, /metrics may still show the store as it was before the load just sent
    (then the next phase would run while the worker still drains this one's jobs).
    """
    start = time.perf_counter()
    while time.perf_counter() - start < within:
        if await open_events(base) == 0 and time.perf_counter() - start > METRICS_STORE_TTL:
            return time.perf_counter() - start
        await asyncio.sleep(0.2)
    raise RuntimeError(f"job backlog did not drain in {within:.0f} s")


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``serve`` and the worker it starts), parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return out


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process ``pid`` has used so far, in seconds (Linux)."""
    # The fields after the command (which may hold spaces) start at state: utime and
    # stime are the 12th and 13th of them.
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> tuple[float, float]:
    """(resident set now, its peak) of process ``pid``, in MB (Linux)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


_PAGE = os.sysconf("SC_PAGE_SIZE")
_PFN_MASK = (1 << 55) - 1
_PRESENT = 1 << 63


def _frames(pid: int) -> set[int] | None:
    """The physical page frames resident in ``pid``'s memory; ``None`` without the right.

    From ``/proc/PID/pagemap`` (Linux; the frame numbers read as 0 without
    CAP_SYS_ADMIN): every mapping of ``/proc/PID/maps``, one 8-byte entry a page.
    """
    frames: set[int] = set()
    found_any = False
    try:
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
        with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
            for line in maps:
                span, *rest = line.split()
                if rest and rest[-1] == "[vsyscall]":
                    continue
                lo, hi = (int(x, 16) for x in span.split("-"))
                pagemap.seek(lo // _PAGE * 8)
                data = pagemap.read((hi - lo) // _PAGE * 8)
                for (entry,) in struct.iter_unpack("<Q", data):
                    if entry & _PRESENT:
                        frame = entry & _PFN_MASK
                        found_any = found_any or frame != 0
                        frames.add(frame)
    except OSError:
        return None
    return frames if found_any else None


def tree_resident_mb(pids: list[int]) -> tuple[float, float]:
    """(resident memory of the processes together, their RSS summed), in MB.

    Together: each physical page once, however many of the processes map it (a
    forked worker shares its parent's start-up heap copy-on-write, and both map
    the same libraries), so this is the memory they hold, where the RSS sum
    counts shared pages once per process. Without the right to read page frames
    (not root) it falls back to the sum of proportional set sizes (PSS).
    """
    rss = sum(rss_mb(p)[0] for p in pids)
    union: set[int] = set()
    for pid in pids:
        frames = _frames(pid)
        if frames is None:
            return sum(_pss_mb(p) for p in pids), rss
        union |= frames
    return len(union) * _PAGE / 2**20, rss


def _pss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def notification(
    instance: str,
    op_occ: str,
    operation: str = "INSTANTIATE",
    state: str = "COMPLETED",
    *,
    vnfcs: int = 1,
) -> bytes:
    """A SOL003 op-occ notification as Tacker sends it (FULL verbosity, ``vnfcs`` VNFCs)."""
    base = "http://127.0.0.1:9890/vnflcm/v2"
    sub = "sub-bench"
    status = "START" if state in ("STARTING", "PROCESSING", "ROLLING_BACK") else "RESULT"
    return json.dumps(
        {
            "id": str(uuid.uuid4()),
            "notificationType": "VnfLcmOperationOccurrenceNotification",
            "subscriptionId": sub,
            "timeStamp": "2026-11-22T03:50:00Z",
            "notificationStatus": status,
            "operationState": state,
            "vnfInstanceId": instance,
            "operation": operation,
            "isAutomaticInvocation": False,
            "vnfLcmOpOccId": op_occ,
            "verbosity": "FULL",
            "affectedVnfcs": [
                {
                    "id": str(uuid.uuid4()),
                    "vduId": "workerNode" if i % 2 else "masterNode",
                    "changeType": "ADDED",
                    "computeResource": {"resourceId": str(uuid.uuid4())},
                    "metadata": {"stack_id": str(uuid.uuid4())},
                }
                for i in range(vnfcs)
            ],
            "_links": {
                "vnfInstance": {"href": f"{base}/vnf_instances/{instance}"},
                "subscription": {"href": f"{base}/subscriptions/{sub}"},
                "vnfLcmOpOcc": {"href": f"{base}/vnf_lcm_op_occs/{op_occ}"},
            },
        }
    ).encode()


async def serve_until_terminated(
    port: int, path: str, post: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> None:
    """Answer POSTs at ``path`` on 127.0.0.1:``port`` with ``post`` (and GETs, the
    subscription test, with 204) until the process is terminated: a floor server's loop."""

    async def get(request: web.Request) -> web.Response:
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post(path, post)
    app.router.add_get(path, get)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
