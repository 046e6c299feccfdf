"""SCALE / HEAL ``PROCESSING``: drain the nodes Tacker is about to delete (the drain hook).

Tacker runs the VNF package's ``scale_start``/``heal_start`` script right after it
notifies PROCESSING and deletes the VMs right after the script returns. Our
script (``Scripts/lccn_hook.py`` of the sample package) posts the servers of the
grant's ``removeResources`` to ``POST /lccn/hooks/drain`` and waits for this
job (see :mod:`subscriber.ingest.hooks`). After ``confirm``:

1. ``drain-request``: the servers of the op-occ's request; with none (a package
   without the hook, a SCALE_OUT, the request not in yet) the job ends here;
2. ``load-params``, ``discover``: the cluster as it is, VMs still there;
3. ``select-leaving``: the nodes on the requested servers;
4. ``release-pvs``: the storage server's PVs, when it is leaving;
5. ``drain-leaving``: each node is cordoned and its pods evicted, then forgotten
   by the cluster through a node that stays (:mod:`handlers.steps.membership`).

Every step reads the cluster first, so a rerun after a crash repeats nothing
that already took effect. What the hook could not drain (a failure, no hook),
the COMPLETED handler's ``retire-nodes`` and ``reconcile-membership`` converge.
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers import steps
from handlers.handler import ClusterHandler
from handlers.job import ClusterJob
from subscriber.kernel import PlanItem

__all__ = ["DrainLeaving"]


class DrainLeaving(ClusterHandler):
    """``SCALE / PROCESSING`` and ``HEAL / PROCESSING``."""

    name = "cluster-drain"

    def steps(self, job: ClusterJob) -> Sequence[PlanItem]:
        return (
            steps.drain_request(job),
            steps.load_params(job),
            steps.survey_nodes(job),
            steps.select_leaving(job),
            steps.release_pvs(job),
            steps.drain_leaving(job),
        )
