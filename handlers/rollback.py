"""ROLLING_BACK: undo what a failed operation's job did, before Tacker deletes what the
operation made (Tacker's ``instantiate_rollback_start`` / ``scale_rollback_start``).

Tacker v2 rolls back a FAILED_TEMP INSTANTIATE or SCALE_OUT when the operator asks
(``openstack vnflcm op rollback``): it notifies ROLLING_BACK, runs the package's
``*_rollback_start`` script, deletes the VMs the operation created, and says
ROLLED_BACK. With the hook wired, these jobs run while the VMs still answer:

``INSTANTIATE / ROLLING_BACK`` -> :class:`RollbackInstantiate`: every node of the
inventory is reset (``kubeadm reset``), the VIM we registered and the inventory are
forgotten, so a later INSTANTIATE on the same machines starts clean.

``SCALE / ROLLING_BACK`` -> :class:`RollbackScale`: the cluster converges back on the
VNFCs the instance had before the SCALE_OUT (Tacker's database keeps them until the
operation ends): every node's ``/etc/hosts`` names them only, and the Node objects of
the workers that joined are deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers import steps
from handlers.handler import ClusterHandler
from handlers.job import ClusterJob
from subscriber.kernel import PlanItem

__all__ = ["RollbackInstantiate", "RollbackScale"]


class RollbackInstantiate(ClusterHandler):
    """``INSTANTIATE / ROLLING_BACK``."""

    name = "cluster-instantiate-rollback"

    def steps(self, job: ClusterJob) -> Sequence[PlanItem]:
        return (
            steps.load_params(job),
            steps.reset_nodes(job),
            steps.delete_vim(job),
            steps.forget_inventory(job),
        )


class RollbackScale(ClusterHandler):
    """``SCALE / ROLLING_BACK`` (Tacker rolls back a SCALE_OUT only)."""

    name = "cluster-scale-rollback"

    def steps(self, job: ClusterJob) -> Sequence[PlanItem]:
        return (
            steps.load_params(job),
            steps.survey_nodes(job),
            steps.configure_hosts(job),
            steps.reconcile_membership(job),
        )
