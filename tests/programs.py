"""Our programs as subprocesses: the CLI (:func:`cli`), ``serve`` (:class:`ServeProcess`),
and the processes a ``serve`` started (its worker: ``serve``'s pid alone no longer runs
the jobs). ``serve``'s runner itself is the test bed's (:mod:`tests.testbed.serve`,
shared with ``bench/``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import aiohttp

from tests import REPO
from tests.factories import op_occ
from tests.testbed import serve
from tests.testbed.serve import NO_HOME, lccn_subscriber, program_env

__all__ = [
    "NO_HOME",
    "ServeProcess",
    "alive",
    "children",
    "cli",
    "gone",
    "job_pid",
    "lccn_subscriber",
    "program_env",
    "tree",
    "worker_pid",
]


def cli(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60, clean: bool = False
) -> subprocess.CompletedProcess[str]:
    """``lccn-subscriber ARGS`` run to its end, output as text (``clean``: see
    :func:`program_env`)."""
    return subprocess.run(
        [sys.executable, "-m", "subscriber.cli", *args],
        cwd=REPO,
        env=program_env(env, clean=clean),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class ServeProcess(serve.ServeProcess):
    """:class:`tests.testbed.serve.ServeProcess` and what only the tests use with it."""

    async def handle_one(self, timeout: float = 60) -> dict[str, object]:
        """Once ready, take one STARTING notification and wait until the worker ran its
        job; returns the notification."""
        await self.ready()
        body = op_occ(state="STARTING")
        async with aiohttp.ClientSession() as http, http.post(self.url, json=body) as resp:
            assert resp.status == 204
        async with asyncio.timeout(timeout):
            while self.status(str(body["vnfLcmOpOccId"])) != "done":
                await asyncio.sleep(0.05)
        return body


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
