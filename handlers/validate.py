"""``<operation> / STARTING``: validate the cluster parameters before Tacker acts.

Tacker does not wait for us, so this is where a typo shows first: the job fails
with the bad fields named (never their values) while the operation is still
running, and the operator can fix the request.
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers import steps
from handlers.handler import ClusterHandler
from handlers.job import ClusterJob
from subscriber.config import ClusterSettings
from subscriber.kernel import PlanItem

__all__ = ["ValidateParams"]


class ValidateParams(ClusterHandler):
    """One step, ``validate-params``: fetch and check the operation's parameters."""

    def __init__(self, name: str, settings: ClusterSettings | None = None) -> None:
        super().__init__(settings)
        self.name = name

    def steps(self, job: ClusterJob) -> Sequence[PlanItem]:
        return (steps.load_params(job, "validate-params"),)
