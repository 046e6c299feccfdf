"""SCALE: the cluster follows the worker VNFCs Tacker added or removed (``scale_end``).

``SCALE / STARTING`` -> :class:`~handlers.validate.ValidateParams`: the parameters
(from the request, or the instance's INSTANTIATE) are there and valid.

``SCALE / COMPLETED`` -> :class:`ScaleCluster`, for SCALE_OUT and SCALE_IN alike:
the nodes now are compared with the inventory; nodes whose VNFC is gone are
deleted (drained before, by the management-driver hook, when the VNF package
has it: see docs/guide/hooks.md), new workers get the scripts, /etc/hosts and the
parameters' proxy and join in parallel with a fresh token, every node's /etc/hosts names exactly the
cluster's nodes, and the job ends by making the cluster, the inventory and
Tacker's VNFCs agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers import steps
from handlers.handler import ClusterHandler
from handlers.job import ClusterJob
from subscriber.kernel import PlanItem

__all__ = ["ScaleCluster"]


class ScaleCluster(ClusterHandler):
    """``SCALE / COMPLETED``."""

    name = "cluster-scale"

    def steps(self, job: ClusterJob) -> Sequence[PlanItem]:
        return (
            steps.load_params(job),
            steps.survey_nodes(job),
            steps.retire_nodes(job),
            steps.upload_scripts(job),
            steps.configure_hosts(job),
            steps.configure_proxy(job),
            steps.join_workers(job),
            steps.configure_registry(job),
            steps.label_workers(job),
            steps.nfs_client(job),
            steps.reconcile_membership(job),
        )
