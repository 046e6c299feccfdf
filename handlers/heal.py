"""HEAL: the cluster takes back the VNFCs Tacker rebuilt (``heal_start`` + ``heal_end``).

``HEAL / STARTING`` -> :class:`~handlers.validate.ValidateParams`.

``HEAL / COMPLETED`` -> :class:`HealCluster`. A rebuilt VNFC keeps its address
(and so its node name) but its VM is new: its old Node object, etcd member and
haproxy backends are retired through a surviving master, then a worker joins
again and a master joins the control plane with a fresh certificate key, and
every master's haproxy sends to the masters again. Rebuilt nodes get the
parameters' proxy, a rebuilt master the user's Helm script. A whole-VNF heal leaves no
master: the cluster is built anew as on INSTANTIATE, its VIM (when VIMs are
registered: v1 by default) is registered anew and a new ``vimConnectionInfo``
entry (new CA and token, or new VIM) is written back. Healing the
master of a single-master cluster whose workers survive is refused, as Tacker's
driver refuses it. The job ends by making the cluster, the inventory and
Tacker's VNFCs agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers import steps
from handlers.handler import ClusterHandler
from handlers.job import ClusterJob
from subscriber.kernel import PlanItem

__all__ = ["HealCluster"]


class HealCluster(ClusterHandler):
    """``HEAL / COMPLETED``."""

    name = "cluster-heal"

    def steps(self, job: ClusterJob) -> Sequence[PlanItem]:
        return (
            steps.load_params(job),
            steps.survey_nodes(job),
            steps.retire_nodes(job),
            steps.upload_scripts(job),
            steps.configure_hosts(job),
            steps.configure_proxy(job),
            steps.converge_masters(job),
            steps.join_workers(job),
            steps.configure_registry(job),
            steps.label_workers(job),
            steps.haproxy_backends(job),
            steps.install_helm(job),
            steps.storage_server(job),
            steps.nfs_client(job),
            steps.register_pvs(job),
            steps.admin_token(job),
            steps.cluster_access(job),
            steps.reregister_vim(job),
            steps.write_back(job),
            steps.reconcile_membership(job),
        )
