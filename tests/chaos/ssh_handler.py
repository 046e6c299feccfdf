"""A handler module for the SSH chaos scenario (``handlers.modules``).

INSTANTIATE COMPLETED runs one step, ``remote-apply``: not idempotent, and
guarded on the host like the cluster handlers' remote steps (a marker written
when the work is done; a later run finds it and skips). On the test host
named by ``LCCN_TEST_SSH_HOST`` it appends ``<event> <job> start`` to
``/tmp/lccn-chaos/effects.log``, sleeps ``LCCN_TEST_STEP_SECONDS``, appends
``... end`` and leaves ``/tmp/lccn-chaos/<event>.done``. That log, on the host,
is the side-effect log: a ``start`` twice for one event is a double run.
"""

from __future__ import annotations

import os
from typing import Any

from schemas import Notification
from subscriber.errors import SkipStep
from subscriber.kernel import JobContext, Plan, RoutingTable, Step
from subscriber.kernel.ports import SshTarget

DIR = "/tmp/lccn-chaos"
# Redirected, never written to the session: it goes on when the connection drops.
_SCRIPT = """
mkdir -p {dir}
if [ -e {dir}/{event}.done ]; then echo already; exit 0; fi
echo "{event} {job} start" >> {dir}/effects.log
sleep {seconds}
echo "{event} {job} end" >> {dir}/effects.log
touch {dir}/{event}.done
"""


async def _remote_apply(ctx: JobContext) -> dict[str, Any]:
    target = SshTarget(host=os.environ["LCCN_TEST_SSH_HOST"], username="root")
    script = _SCRIPT.format(
        dir=DIR,
        event=ctx.event_id,
        job=ctx.job_id,
        seconds=float(os.environ.get("LCCN_TEST_STEP_SECONDS", "1")),
    )
    result = await ctx.services.need_ssh().run(target, script)
    result.check(step="remote-apply")
    if result.stdout.strip() == "already":
        raise SkipStep("already applied on the host", {"applied": False})
    return {"applied": True}


class ChaosRemote:
    name = "chaos-remote"

    def plan(self, notification: Notification) -> Plan:
        return Plan((Step("remote-apply", _remote_apply, idempotent=False, timeout=60.0),))


def register(registry: RoutingTable) -> None:
    registry.register(ChaosRemote(), operation="INSTANTIATE", state="COMPLETED")
