"""CHANGE_EXT_CONN / COMPLETED: Tacker's VIM entry follows the cluster's new connectivity.

A handler module of one's own, as ``handlers.modules: [change_ext_conn]`` loads it
(the directory holding it on ``PYTHONPATH``). After Tacker changed the VNF's external
connectivity (a new floating IP on the cluster CP, say), the cluster is the same but
the address it is reached at may not be: survey the nodes again, read the endpoint and
CA, and write them back into ``vimConnectionInfo`` when they differ. Every step is a
shared, checkpointed one from :mod:`handlers.steps`; ``confirm`` comes first on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers import steps
from handlers.handler import ClusterHandler
from handlers.job import ClusterJob
from schemas import LcmOperationStateType, LcmOperationType
from subscriber.kernel import PlanItem, RoutingTable


class FollowConnectivity(ClusterHandler):
    """``CHANGE_EXT_CONN / COMPLETED``."""

    name = "cluster-change-ext-conn"

    def steps(self, job: ClusterJob) -> Sequence[PlanItem]:
        return (
            steps.load_params(job),
            steps.survey_nodes(job),
            steps.cluster_access(job),
            steps.write_back(job),
        )


def register(table: RoutingTable) -> None:
    table.register(
        FollowConnectivity(),
        operation=LcmOperationType.CHANGE_EXT_CONN,
        state=LcmOperationStateType.COMPLETED,
    )
