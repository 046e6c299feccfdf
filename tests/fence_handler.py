"""A handler module for multi-replica tests: every step run leaves a line in a side-effect log.

Loaded into ``serve`` subprocesses through ``LCCN_HANDLERS__MODULES``. Plan:
``prepare`` -> ``apply`` (not idempotent, takes ``LCCN_TEST_STEP_SECONDS``) ->
``finish``. Each run appends ``<time> <pid> <event_id> <job_id> <step>
start|end <instance>`` to the file named by ``LCCN_TEST_SIDE_EFFECTS`` (one
``write`` of one short line in append mode, so lines of several processes
never interleave), so a test counts runs and overlaps instead of assuming them.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from schemas import Notification
from subscriber.kernel import JobContext, Plan, RoutingTable, Step

NON_IDEMPOTENT = frozenset({"apply"})


def mark(ctx: JobContext, step: str, what: str, at: float | None = None) -> None:
    """Append one line to the side-effect log (see the module docstring)."""
    line = (
        f"{at or time.time():.6f} {os.getpid()} {ctx.event_id} {ctx.job_id} {step} {what} "
        f"{ctx.vnf_instance_id}\n"
    )
    with open(os.environ["LCCN_TEST_SIDE_EFFECTS"], "a", encoding="utf-8") as fh:
        fh.write(line)


def _step(name: str, seconds: float) -> Step:
    async def run(ctx: JobContext) -> None:
        # A start is dated when the runner decided it (before its last lease check): a
        # process stopped between that check and this line began the step before it
        # stopped, and a run it decided after waking past its lease would show.
        mark(ctx, name, "start", ctx.step_started_at)
        await asyncio.sleep(seconds)
        mark(ctx, name, "end")

    return Step(name, run, idempotent=name not in NON_IDEMPOTENT, timeout=60.0)


class FenceHandler:
    name = "fence-test"

    def plan(self, notification: Notification) -> Plan:
        seconds = float(os.environ.get("LCCN_TEST_STEP_SECONDS", "0.2"))
        return Plan((_step("prepare", 0.01), _step("apply", seconds), _step("finish", 0.01)))


def register(registry: RoutingTable) -> None:
    registry.register(FenceHandler())


@dataclass(frozen=True, slots=True)
class Mark:
    at: float
    pid: int
    event_id: int
    job_id: int
    step: str
    what: str
    instance: str


def marks(path: Path) -> list[Mark]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        at, pid, event_id, job_id, step, what, instance = line.split()
        out.append(Mark(float(at), int(pid), int(event_id), int(job_id), step, what, instance))
    return out


def double_runs(all_marks: list[Mark]) -> int:
    """Extra starts of a non-idempotent step of one event (0 when none ran twice)."""
    starts: dict[tuple[int, str], int] = {}
    for m in all_marks:
        if m.what == "start" and m.step in NON_IDEMPOTENT:
            starts[(m.event_id, m.step)] = starts.get((m.event_id, m.step), 0) + 1
    return sum(n - 1 for n in starts.values())


def doubled(all_marks: list[Mark]) -> list[Mark]:
    """The marks of every non-idempotent step that started more than once for one event."""
    starts: dict[tuple[int, str], int] = {}
    for m in all_marks:
        if m.what == "start" and m.step in NON_IDEMPOTENT:
            starts[(m.event_id, m.step)] = starts.get((m.event_id, m.step), 0) + 1
    twice = {key for key, n in starts.items() if n > 1}
    return [m for m in all_marks if (m.event_id, m.step) in twice]


def overlaps(all_marks: list[Mark], frozen: dict[int, tuple[float, float]] | None = None) -> int:
    """Pairs of step runs of one instance, in different processes, that overlap in time.

    ``frozen`` maps a pid to a (stopped, continued) span: while stopped a
    process runs nothing, so a run it began before counts as ending at
    ``stopped`` when it ends (or has not ended) after ``continued``.
    """
    frozen = frozen or {}
    runs: dict[tuple[int, int, str], list[float]] = {}
    inst: dict[tuple[int, int, str], str] = {}
    for m in all_marks:
        key = (m.pid, m.job_id, m.step)
        inst[key] = m.instance
        span = runs.setdefault(key, [m.at, float("inf")])
        if m.what == "end":
            span[1] = m.at
    spans = []
    for key, (start, end) in runs.items():
        pid = key[0]
        if pid in frozen and start < frozen[pid][0] and end > frozen[pid][0]:
            end = frozen[pid][0]
        spans.append((inst[key], pid, start, end))
    count = 0
    for i, (ia, pa, sa, ea) in enumerate(spans):
        for ib, pb, sb, eb in spans[i + 1 :]:
            if ia == ib and pa != pb and sa < eb and sb < ea:
                count += 1
    return count


def handler_env(
    effects: Path,
    step_seconds: float,
    module: str = "tests.fence_handler",
    **dispatch: float,
) -> dict[str, str]:
    """Environment of a ``serve`` running the handler ``module`` (this one, or another that
    writes the same side-effect log: ``effects``) with short rescans; ``dispatch``: more
    ``dispatch.*`` settings."""
    effects.touch()
    env = {
        "LCCN_HANDLERS__MODULES": json.dumps([module]),
        "LCCN_TEST_SIDE_EFFECTS": str(effects),
        "LCCN_TEST_STEP_SECONDS": str(step_seconds),
        "LCCN_DISPATCH__RESCAN_INTERVAL": "0.3",
        "LCCN_DISPATCH__REORDER_WINDOW": "0.05",
    }
    env.update({f"LCCN_DISPATCH__{k.upper()}": str(v) for k, v in dispatch.items()})
    return env
