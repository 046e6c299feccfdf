"""INSTANTIATE: make the VNF's VMs a Kubernetes cluster (Tacker's ``instantiate_end``).

``INSTANTIATE / STARTING`` -> :class:`ValidateInstantiate`: check the parameters
at once and fail the job with a clear message for the operator (Tacker does not
wait for us, so this is where a typo shows first).

``INSTANTIATE / COMPLETED`` -> :class:`InstantiateCluster`; its steps are in
:meth:`InstantiateCluster.steps` (each one documented in :mod:`handlers.steps`).
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers import steps
from handlers.handler import ClusterHandler
from handlers.job import ClusterJob
from handlers.validate import ValidateParams
from subscriber.config import ClusterSettings
from subscriber.kernel import PlanItem

__all__ = ["InstantiateCluster", "ValidateInstantiate"]


class InstantiateCluster(ClusterHandler):
    """``INSTANTIATE / COMPLETED``: discover the nodes, build the cluster, tell Tacker."""

    name = "cluster-instantiate"

    def steps(self, job: ClusterJob) -> Sequence[PlanItem]:
        return (
            steps.load_params(job),
            steps.discover_nodes(job),
            steps.upload_scripts(job),
            steps.configure_hosts(job),
            steps.configure_proxy(job),
            steps.init_main_master(job),
            steps.join_masters(job),
            steps.join_workers(job),
            steps.configure_registry(job),
            steps.label_workers(job),
            steps.install_helm(job),
            steps.storage_server(job),
            steps.nfs_client(job),
            steps.register_pvs(job),
            steps.admin_token(job),
            steps.cluster_access(job),
            steps.register_vim(job),
            steps.write_back(job),
        )


class ValidateInstantiate(ValidateParams):
    """``INSTANTIATE / STARTING``: validate the parameters before Tacker builds the VMs."""

    def __init__(self, settings: ClusterSettings | None = None) -> None:
        super().__init__("cluster-instantiate-validate", settings)
