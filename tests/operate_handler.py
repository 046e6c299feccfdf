"""An INSTANTIATE-like handler for the replay and observability tests.

Plan: ``discover`` -> ``install`` -> ``token``. ``install`` fails like a real
SSH command (``subscriber.ssh.CommandResult.check`` -> ``CommandFailed`` with
stdout/stderr tails) while the file named by ``fault_file`` exists, so a test
"removes the fault" by deleting it. Every step run appends
``<job_id> <event_id> <step> <start|end>`` to ``runs_file``, so tests (and
other processes) can count runs and detect overlaps.

Loaded into ``serve`` subprocesses through ``LCCN_HANDLERS__MODULES``
(``register`` reads ``LCCN_TEST_FAULT_FILE``, ``LCCN_TEST_RUNS_FILE``,
``LCCN_TEST_STEP_SECONDS``, ``LCCN_TEST_LEAK_SECRET``).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from schemas import Notification
from subscriber.kernel import JobContext, Plan, RoutingTable, Step
from subscriber.kernel.ports import CommandResult

STEPS = ("discover", "install", "token")


class OperateHandler:
    name = "operate-test"

    def __init__(
        self,
        fault_file: Path,
        runs_file: Path,
        step_seconds: float = 0.0,
        secret: str = "",
    ) -> None:
        self.fault_file = fault_file
        self.runs_file = runs_file
        self.step_seconds = step_seconds
        self.secret = secret

    def _mark(self, ctx: JobContext, step: str, what: str) -> None:
        with self.runs_file.open("a", encoding="utf-8") as fh:
            fh.write(f"{ctx.job_id} {ctx.event_id} {step} {what} {ctx.vnf_instance_id}\n")

    def plan(self, notification: Notification) -> Plan:
        def make(name: str) -> Step:
            async def run(ctx: JobContext) -> Any:
                self._mark(ctx, name, "start")
                try:
                    if self.step_seconds:
                        await asyncio.sleep(self.step_seconds)
                    if name == "install" and self.fault_file.exists():
                        secret = self.secret or "no-secret"
                        CommandResult(
                            host="10.10.0.5",
                            command="sudo -S kubeadm init",
                            exit_status=1,
                            stdout=f"[init] Using Kubernetes v1.30\nsudo password={secret}\n",
                            stderr=(
                                "error execution phase preflight: port 6443 is in use\n"
                                f"Authorization: Bearer {secret}\n"
                            ),
                            duration=0.2,
                            secrets=(secret,),
                        ).check(step=name)
                    return {"ran": name}
                finally:
                    self._mark(ctx, name, "end")

            return Step(name, run, idempotent=True, timeout=30.0)

        return Plan(tuple(make(n) for n in STEPS))


def runs(runs_file: Path) -> list[tuple[int, int, str, str, str]]:
    """The recorded step runs: (job_id, event_id, step, start|end, instance)."""
    out = []
    for line in runs_file.read_text().splitlines():
        job, event, step, what, instance = line.split()
        out.append((int(job), int(event), step, what, instance))
    return out


def register(registry: RoutingTable) -> None:
    registry.register(
        OperateHandler(
            Path(os.environ["LCCN_TEST_FAULT_FILE"]),
            Path(os.environ["LCCN_TEST_RUNS_FILE"]),
            float(os.environ.get("LCCN_TEST_STEP_SECONDS", "0")),
            os.environ.get("LCCN_TEST_LEAK_SECRET", ""),
        )
    )


def handler_env(fault: Path, runs_file: Path) -> dict[str, str]:
    """What makes ``serve`` and the CLI load this handler (their shared config)."""
    return {
        "LCCN_HANDLERS__MODULES": json.dumps(["tests.operate_handler"]),
        "LCCN_TEST_FAULT_FILE": str(fault),
        "LCCN_TEST_RUNS_FILE": str(runs_file),
    }
