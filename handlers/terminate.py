"""TERMINATE / COMPLETED: undo what INSTANTIATE registered (Tacker's v1 ``terminate_end``).

The VMs are gone by now, so nothing runs on them. After ``confirm``::

    load-params         the parameters INSTANTIATE used (the VIM's name among them)
    delete-vim          the VIM we registered, if any, by that name
    clear-write-back    v1 only: remove our vimConnectionInfo entry. Tacker v2
                        resets vimConnectionInfo itself at TERMINATE and refuses a
                        PATCH during and after it, so nothing is sent there.
    forget-inventory    drop the instance's cluster inventory
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers import steps
from handlers.handler import ClusterHandler
from handlers.job import ClusterJob
from subscriber.kernel import PlanItem

__all__ = ["TerminateCluster"]


class TerminateCluster(ClusterHandler):
    """``TERMINATE / COMPLETED``."""

    name = "cluster-terminate"

    def steps(self, job: ClusterJob) -> Sequence[PlanItem]:
        return (
            steps.load_params(job),
            steps.delete_vim(job),
            steps.clear_write_back(job),
            steps.forget_inventory(job),
        )
