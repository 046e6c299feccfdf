"""``<operation> / STARTING``: validate the cluster parameters before Tacker acts.

Tacker does not wait for us, so this is where a typo shows first: the job fails
with the bad fields named (never their values) while the operation is still
running, and the operator can fix the request.
"""

from __future__ import annotations

from handlers import steps
from handlers.job import ClusterJob
from schemas import Notification
from subscriber.config import ClusterSettings
from subscriber.kernel import Plan

__all__ = ["ValidateParams"]


class ValidateParams:
    """One step, ``validate-params``: fetch and check the operation's parameters."""

    def __init__(self, name: str, settings: ClusterSettings | None = None) -> None:
        self.name = name
        self.settings = settings or ClusterSettings()

    def plan(self, notification: Notification) -> Plan:
        job = ClusterJob(self.settings, notification)
        return Plan((steps.load_params(job, "validate-params"),))
