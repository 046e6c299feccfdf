"""SCALE / HEAL ``PROCESSING``: drain the nodes Tacker is about to delete (the drain hook).

Tacker runs the VNF package's ``scale_start``/``heal_start`` script right after it
notifies PROCESSING and deletes the VMs right after the script returns. Our
script (``Scripts/lccn_hook.py`` of the sample package) posts the servers of the
grant's ``removeResources`` to ``POST /lccn/hooks/drain`` and waits for this
job (see :mod:`subscriber.ingest.hooks`):

1. ``drain-request``: the servers of the op-occ's request; with none (a package
   without the hook, a SCALE_OUT, the request not in yet) the job ends here;
2. ``load-params``, ``discover``: the cluster as it is, VMs still there;
3. ``select-leaving``: the nodes on the requested servers;
4. ``drain-leaving``: each is cordoned and its pods evicted, a master also leaves
   the other masters' haproxy backends, its Node object is deleted and, for a
   master, its etcd member removed (while it can still answer), through a node
   that stays.

Every step reads the cluster first, so a rerun after a crash repeats nothing
that already took effect. What the hook could not drain (a failure, no hook),
the COMPLETED handler's ``retire-nodes`` and ``reconcile-membership`` converge.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from handlers import steps, storage_steps
from handlers.job import ClusterHandler, ClusterJob
from handlers.toolkit import kubeadm, kubectl
from schemas.hooks import DRAIN_HANDLER, REQUEST_STEP, SELECT_STEP, drain_key
from subscriber.errors import PermanentStepError
from subscriber.kernel import JobContext, PlanItem, SkipStep, Step, StepsFor

__all__ = ["DrainLeaving", "drain_leaving", "drain_request", "select_leaving"]

REQUEST, SELECT = REQUEST_STEP, SELECT_STEP  # read back by the hook's answer


def drain_request(job: ClusterJob) -> Step:
    """The servers of the op-occ's drain request, as stored by the hook endpoint."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        key = drain_key(job.notification.vnfLcmOpOccId)
        raw = await ctx.services.need_values().get_value(key)
        if raw is None:
            raise SkipStep("no drain requested for this operation", {"servers": []})
        return {"servers": sorted(json.loads(raw)["servers"])}

    return Step(REQUEST, run, idempotent=True, timeout=30.0)


def select_leaving(job: ClusterJob) -> Step:
    """The nodes on the requested servers (by Nova server id, or VNFC id)."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        servers = ctx.results[REQUEST]["servers"]
        topo = job.topology(ctx)
        leaving = [n for n in topo.nodes if n.server_id in servers or n.vnfc_id in servers]
        unknown = [s for s in servers if not any(s in (n.server_id, n.vnfc_id) for n in leaving)]
        return {
            "nodes": [n.name for n in leaving],
            "unknown": unknown,  # not a node of this cluster (a storage VM, already gone ...)
        }

    return Step(SELECT, run, idempotent=True, timeout=30.0)


def drain_leaving(job: ClusterJob) -> Step:
    """Drain, then forget, each selected node while its VM still runs."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        names = set(ctx.results[SELECT]["nodes"])
        if not names:
            raise SkipStep("no node of this cluster is leaving", {"drained": []})
        topo, shell = job.topology(ctx), await job.shell(ctx)
        via = await kubeadm.anchor(shell, topo, exclude=names)
        if via is None:
            raise PermanentStepError(
                "every master is leaving: no node stays to drain through (a single-master "
                "cluster's master cannot be healed: heal the whole VNF instead)",
                step="drain-leaving",
            )
        timeout = job.settings.drain_timeout
        done: dict[str, Any] = {"drained": [], "haproxy": [], "etcdMembers": []}
        stays = [m for m in topo.masters if m.name not in names]
        for node in (n for n in topo.nodes if n.name in names):
            if await kubectl.drain_node(
                shell, via, node.name, timeout=timeout, step="drain-leaving"
            ):
                done["drained"].append(node.name)
            await steps.forget_node(shell, topo, via, node, stays, done, step="drain-leaving")
        return done

    return Step(
        "drain-leaving", run, idempotent=True, timeout=job.settings.drain_timeout * 4 + 120.0
    )


class DrainLeaving(ClusterHandler):
    """``SCALE / PROCESSING`` and ``HEAL / PROCESSING``."""

    name = DRAIN_HANDLER

    def steps(self, job: ClusterJob) -> Sequence[PlanItem]:
        def expand(request: dict[str, Any]) -> list[Step]:
            if not request.get("servers"):
                return []
            return [
                steps.load_params(job),
                steps.survey_nodes(job),
                select_leaving(job),
                storage_steps.release_pvs(job, REQUEST, SELECT),
                drain_leaving(job),
            ]

        return (
            drain_request(job),
            StepsFor(
                "load-params, discover, select-leaving, release-pvs, drain-leaving",
                REQUEST,
                expand,
            ),
        )
