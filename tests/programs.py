"""Our programs as subprocesses: the CLI (:func:`cli`), ``serve`` (:class:`ServeProcess`),
and the processes a ``serve`` started (its worker: ``serve``'s pid alone no longer runs
the jobs)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import aiohttp

from tests import REPO


def program_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment, the checkout on ``PYTHONPATH`` (test handler modules), and ``extra``."""
    return {**os.environ, "PYTHONPATH": str(REPO), **(extra or {})}


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``lccn-subscriber ARGS`` run to its end (at most a minute), output as text."""
    return subprocess.run(
        [sys.executable, "-m", "subscriber.cli", *args],
        cwd=REPO,
        env=program_env(env),
        capture_output=True,
        text=True,
        timeout=60,
    )


class ServeProcess:
    """``lccn-subscriber serve`` on a SQLite file in ``tmp``, its output in ``serve-N.log``."""

    def __init__(self, tmp: Path, port: int, env: dict[str, str]) -> None:
        self.tmp, self.port, self.env = tmp, port, env
        self.db = tmp / "lccn.db"
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/lccn/notifications"

    def start(self) -> None:
        log = self.tmp / f"serve-{len(self.logs)}.log"
        self.logs.append(log)
        with log.open("wb") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "subscriber.cli",
                    "serve",
                    "--port",
                    str(self.port),
                    "--database",
                    f"sqlite+aiosqlite:///{self.db}",
                ],
                cwd=REPO,
                env=program_env(self.env),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    async def ready(self, timeout: float = 30) -> None:
        """The callback answers and ``/readyz`` says ready (the worker runs jobs too)."""
        async with asyncio.timeout(timeout), aiohttp.ClientSession() as http:
            while True:
                assert self.proc is not None and self.proc.poll() is None, self.log_text()
                try:
                    async with http.get(self.url) as resp:
                        callback = resp.status == 204
                    async with http.get(f"http://127.0.0.1:{self.port}/readyz") as resp:
                        if callback and resp.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)

    def rows(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        with sqlite3.connect(self.db, timeout=10) as conn:
            return conn.execute(sql, args).fetchall()


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux ``/proc``); empty once it is gone."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def tree(pid: int) -> set[int]:
    """``pid`` and every process below it."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        todo += children(p)
    return out


def job_pid(pid: int) -> int:
    """The process running ``serve``'s jobs: its worker (``--role all``), else itself."""
    found = children(pid)
    return found[0] if found else pid


async def worker_pid(pid: int, within: float = 30) -> int:
    """The worker ``serve --role all`` at ``pid`` started, once it runs."""
    async with asyncio.timeout(within):
        while True:
            found = children(pid)
            if found:
                return found[0]
            await asyncio.sleep(0.05)


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped has stopped running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


async def gone(pids: set[int], within: float = 10) -> None:
    """Wait until none of ``pids`` runs (a killed ``serve``'s worker must not outlive it)."""
    async with asyncio.timeout(within):
        while any(alive(p) for p in pids):
            await asyncio.sleep(0.02)
