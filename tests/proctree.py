"""The processes a ``serve`` started (its worker): ``serve``'s pid alone no longer runs the jobs."""

from __future__ import annotations

import asyncio
from pathlib import Path


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
