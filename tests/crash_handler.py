"""A handler module loaded into a ``serve`` subprocess by the crash tests.

Its middle step has a real, non-idempotent side effect: it appends a line to
the file named by ``LCCN_TEST_SIDE_EFFECTS`` and then takes a while, so that a
SIGKILL often lands after the effect and before the checkpoint.
"""

from __future__ import annotations

import asyncio
import os

from schemas import Notification
from subscriber.kernel import JobContext, Plan, RoutingTable, Step


async def _prepare(ctx: JobContext) -> None:
    await asyncio.sleep(0.01)


async def _side_effect(ctx: JobContext) -> None:
    with open(os.environ["LCCN_TEST_SIDE_EFFECTS"], "a", encoding="utf-8") as fh:
        fh.write(f"{ctx.job_id} {ctx.event_id}\n")
        fh.flush()
        os.fsync(fh.fileno())
    await asyncio.sleep(float(os.environ.get("LCCN_TEST_STEP_SECONDS", "0.05")))


async def _finish(ctx: JobContext) -> None:
    await asyncio.sleep(0.01)


class CrashHandler:
    name = "crash-test"

    def plan(self, notification: Notification) -> Plan:
        return Plan(
            (
                Step("prepare", _prepare),
                Step("side_effect", _side_effect, idempotent=False),
                Step("finish", _finish),
            )
        )


def register(registry: RoutingTable) -> None:
    registry.register(CrashHandler())
