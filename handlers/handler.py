"""The one handler idiom: a :class:`ClusterHandler` plans a :class:`ClusterJob`'s steps.

Every cluster operation (instantiate, scale, heal, terminate, the drain hook,
the STARTING validations) is a subclass that names itself and lists its steps;
:meth:`ClusterHandler.plan` puts ``confirm`` (:mod:`handlers.steps.operation`)
first, so nothing acts on a notification before Tacker confirmed it.
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers.job import ClusterJob
from handlers.steps.operation import confirm
from schemas import Notification
from subscriber.config import ClusterSettings
from subscriber.kernel import Plan, PlanItem

__all__ = ["ClusterHandler"]


class ClusterHandler:
    """A cluster operation's handler: a name and the steps of its plan for one job.

    Subclasses set ``name`` and write :meth:`steps`; :meth:`plan` makes the
    job's :class:`ClusterJob` (no I/O), hands it to them and puts ``confirm``
    first.
    """

    name = "cluster"

    def __init__(self, settings: ClusterSettings | None = None) -> None:
        self.settings = settings or ClusterSettings()

    def plan(self, notification: Notification) -> Plan:
        job = ClusterJob(self.settings, notification)
        return Plan((confirm(job), *self.steps(job)))

    def steps(self, job: ClusterJob) -> Sequence[PlanItem]:
        """The plan's steps for ``job`` after ``confirm``, in order (pure: make steps,
        do nothing)."""
        raise NotImplementedError
