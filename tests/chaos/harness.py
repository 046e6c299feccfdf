"""What the chaos scenarios share: ``serve`` subprocesses, the notification stream, the checks.

* :class:`Replica`: one ``serve`` subprocess on a given store (``--database``),
  the side-effect handler loaded through the public handler-modules setting.
* :class:`Stream`: senders posting op-occ chains (STARTING, PROCESSING,
  COMPLETED) over HTTP until stopped, recording every answer.
* :func:`settle` and :func:`check_store`: wait until every stored event is
  terminal, then hold the store against what was acknowledged and against the
  side-effect log (tests/fence_handler.py); :meth:`Figures.line` is the one
  line each scenario prints for the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from tests.factories import op_occ, uid
from tests.fence_handler import NON_IDEMPOTENT, double_runs, marks
from tests.programs import ServeProcess, job_pid, tree

__all__ = [
    "TERMINAL",
    "Figures",
    "Replica",
    "Stream",
    "check_store",
    "pg_rows",
    "settle",
]

TERMINAL = ("done", "failed", "stale", "ignored")


class Replica(ServeProcess):
    """One ``serve`` subprocess of a chaos run: ready once its callback answers (its
    ``/readyz`` may rightly say 503), stopped hard."""

    def __init__(self, name: str, tmp: Path, url: str, env: dict[str, str]) -> None:
        super().__init__(tmp, env=env, database=url)
        self.name, self.db_url = name, url

    @property
    def pid(self) -> int:
        """The process that runs this replica's steps (its worker; the marks carry it)."""
        assert self.proc is not None
        return job_pid(self.proc.pid)

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to every process of the replica (a paused VM pauses them all)."""
        assert self.proc is not None
        for pid in tree(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    async def ready(self, timeout: float = 60) -> None:
        """Wait until the callback answers Tacker's test GET."""
        async with asyncio.timeout(timeout), aiohttp.ClientSession() as http:
            while True:
                assert self.alive(), self.log_text()
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(self.url) as resp:
                        if resp.status == 204:
                            return
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        """SIGKILL (after a SIGCONT, should it be stopped) and reap."""
        if self.alive():
            assert self.proc is not None
            self.signal_all(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(30)


@dataclass
class Stream:
    """Senders posting op-occ chains, each chain in order, to ``targets()``'s URLs.

    ``acked`` holds every body answered 204; ``answers`` counts every status
    (``"error"`` for a connection that failed), ``answered`` keeps
    ``(time, status)`` of each answer for checks over a time window.
    """

    targets: Callable[[], Sequence[str]]
    senders: int = 4
    pause: float = 0.005
    sent: int = 0
    acked: list[dict[str, Any]] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)
    answered: list[tuple[float, str]] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._sender(i)) for i in range(self.senders)]

    async def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        async with asyncio.timeout(timeout):
            await asyncio.gather(*self._tasks)

    async def _sender(self, n: int) -> None:
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            i = n
            while not self._stop.is_set():
                inst, occ = uid(), uid()
                for state in ("STARTING", "PROCESSING", "COMPLETED"):
                    targets = self.targets()
                    if not targets:
                        await asyncio.sleep(0.05)
                        continue
                    body = op_occ(instance=inst, op_occ_id=occ, state=state)
                    self.sent += 1
                    try:
                        async with http.post(targets[i % len(targets)], json=body) as r:
                            status = str(r.status)
                            if r.status == 204:
                                self.acked.append(body)
                    except (TimeoutError, aiohttp.ClientError):
                        status = "error"  # not acknowledged
                    self.answers[status] += 1
                    self.answered.append((time.time(), status))
                    i += 1
                    await asyncio.sleep(self.pause)


async def pg_rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [tuple(r) for r in await conn.fetch(sql)]
    finally:
        await conn.close()


async def settle(dsn: str, stall: float = 60, timeout: float = 360) -> None:
    """Wait until there are events and every one is terminal; else fail saying which are not.

    Fails once no event has become terminal for ``stall`` seconds (the service is
    stuck), or after ``timeout`` in all: a backlog left by a fast stream on a slow
    machine takes what it takes to work off, as long as it is being worked off.
    """
    open_sql = (
        f"SELECT COUNT(*), COUNT(*) FILTER (WHERE status NOT IN {tuple(TERMINAL)}) FROM events"
    )
    try:
        async with asyncio.timeout(timeout):
            fewest, since = None, time.monotonic()
            while True:
                [(total, still_open)] = await pg_rows(dsn, open_sql)
                if total and not still_open:
                    return
                if fewest is None or still_open < fewest:
                    fewest, since = still_open, time.monotonic()
                elif time.monotonic() - since > stall:
                    raise TimeoutError
                await asyncio.sleep(0.3)
    except TimeoutError:
        open_events = await pg_rows(
            dsn,
            "SELECT e.id, e.status, e.vnf_instance_id, e.operation_state, l.owner, l.token, "
            "l.expires_at - extract(epoch from now()), "
            "(SELECT string_agg(j.status || '/' || j.attempts || '/' || coalesce(j.next_attempt_at"
            " - extract(epoch from now()), 0)::int, ',') FROM jobs j WHERE j.event_id = e.id) "
            "FROM events e LEFT JOIN leases l ON l.lane = e.vnf_instance_id "
            f"WHERE e.status NOT IN {tuple(TERMINAL)} ORDER BY e.id LIMIT 20",
        )
        raise AssertionError(
            f"events not terminal ({stall:.0f} s without progress, or {timeout:.0f} s in all) "
            "(id, status, lane, state, lease owner, "
            f"token, lease seconds left, jobs status/attempts/retry in s): {open_events}"
        ) from None


@dataclass(frozen=True)
class Figures:
    """A scenario's figures; ``side_effects`` and ``double_runs`` count the
    scenario's side effect (the step log, or Tacker's PATCHes, or a host's log)."""

    sent: int
    acked: int
    stored: int
    statuses: dict[str, int]
    interrupted: int
    side_effects: int
    double_runs: int

    def line(self, scenario: str, **extra: object) -> str:
        more = "".join(f" {k}={v}" for k, v in extra.items())
        return (
            f"\nchaos {scenario}: sent={self.sent} acked={self.acked} stored={self.stored} "
            f"double runs={self.double_runs} statuses={self.statuses} "
            f"interrupted={self.interrupted} side effects={self.side_effects}"
            f"{more}"
        )


async def check_store(
    dsn: str, sent: int, acked: Sequence[dict[str, Any]], effects: Path
) -> Figures:
    """Every acknowledged notification stored once, every event terminal, no double run.

    Only events whose step was cut off mid-run (``interrupted``) may be failed.
    Returns the figures.
    """
    stored = Counter(r[0] for r in await pg_rows(dsn, "SELECT notification_id FROM events"))
    statuses = Counter(r[0] for r in await pg_rows(dsn, "SELECT status FROM events"))
    interrupted = (
        await pg_rows(dsn, "SELECT COUNT(*) FROM jobs WHERE error_class = 'interrupted'")
    )[0][0]
    failed_otherwise = await pg_rows(
        dsn,
        "SELECT e.id FROM events e WHERE e.status = 'failed' AND NOT EXISTS "
        "(SELECT 1 FROM jobs j WHERE j.event_id = e.id AND j.error_class = 'interrupted')",
    )
    all_marks = marks(effects)
    figures = Figures(
        sent=sent,
        acked=len(acked),
        stored=sum(stored.values()),
        statuses=dict(statuses),
        interrupted=int(interrupted),
        side_effects=sum(m.what == "start" and m.step in NON_IDEMPOTENT for m in all_marks),
        double_runs=double_runs(all_marks),
    )
    missing = {b["id"] for b in acked} - set(stored)
    assert not missing, f"{len(missing)} acknowledged notifications were lost"
    assert not stored or max(stored.values()) == 1, "a notification was stored twice"
    assert set(statuses) <= set(TERMINAL), statuses
    assert figures.double_runs == 0, "a non-idempotent step ran twice"
    assert not failed_otherwise, f"events failed other than by an interruption: {failed_otherwise}"
    return figures
