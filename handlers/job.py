"""One job run's view of its cluster: made by a plan without I/O, filled in by its steps.

A :class:`ClusterJob` is created by a handler's ``plan`` (pure) and shared by
the plan's steps. What it learns from the outside world it learns inside a
step: the parameters (from Tacker, they hold passwords, so they stay in memory
and are fetched again by the first step that needs them after a restart), and
the topology (the ``discover`` step's checkpointed result).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from handlers.toolkit.params import api_version, load_params, not_a_cluster
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import Topology
from schemas import Notification, VnfLcmOperationOccurrenceNotification
from schemas.cluster_params import K8sClusterInstallationParams
from subscriber.config import ClusterSettings
from subscriber.errors import NotACluster
from subscriber.kernel import JobContext, Plan, PlanItem, StepsFor
from subscriber.kernel.ports import ApiVersion

__all__ = ["DISCOVER", "ClusterHandler", "ClusterJob"]

DISCOVER = "discover"  # the step whose result is the topology


class ClusterJob:
    """The cluster of one job run.

    Arguments:
        settings: the ``cluster`` settings.
        notification: the event's (op-occ) notification.

    Raises:
        TypeError: the notification is not an op-occ notification.
    """

    def __init__(self, settings: ClusterSettings, notification: Notification) -> None:
        if not isinstance(notification, VnfLcmOperationOccurrenceNotification):
            raise TypeError("cluster handlers serve op-occ notifications only")
        self.settings = settings
        self.notification = notification
        self.api: ApiVersion = api_version(notification)
        self._params: K8sClusterInstallationParams | None = None

    async def params(self, ctx: JobContext) -> K8sClusterInstallationParams:
        """The operation's parameters (fetched from Tacker once per run)."""
        if self._params is None:
            self._params = await load_params(ctx.services.need_tacker(), self.notification)
        return self._params

    async def shell(self, ctx: JobContext) -> NodeShell:
        """Root shells on the nodes with this operation's credentials."""
        return NodeShell(ctx.services.need_ssh(), self.settings, await self.params(ctx))

    def topology(self, ctx: JobContext) -> Topology:
        """The cluster as the ``discover`` step found it.

        Raises:
            RuntimeError: the plan asked for it before ``discover`` ran.
        """
        found = ctx.results.get(DISCOVER)
        if found is None:
            raise RuntimeError("the cluster's nodes are not discovered yet")
        return Topology.from_json(found)

    async def vim_name(self, ctx: JobContext) -> str:
        return (await self.params(ctx)).vim_name_for(ctx.vnf_instance_id)


class ClusterHandler:
    """A cluster operation's handler: a name and the steps of its plan for one job.

    Subclasses set ``name`` and write :meth:`steps`; :meth:`plan` makes the
    job's :class:`ClusterJob` (no I/O) and hands it to them.
    """

    name = "cluster"

    def __init__(self, settings: ClusterSettings | None = None) -> None:
        self.settings = settings or ClusterSettings()

    def plan(self, notification: Notification) -> Plan:
        items = self.steps(ClusterJob(self.settings, notification))
        return Plan(tuple(_clusters_only(item) for item in items))

    def steps(self, job: ClusterJob) -> Sequence[PlanItem]:
        """The plan's steps for ``job``, in order (pure: make steps, do nothing)."""
        raise NotImplementedError


def _clusters_only(item: PlanItem) -> PlanItem:
    """``item``, skipped once an earlier step found the VNF is not a cluster (a CNF).

    The parameters step raises :class:`~subscriber.errors.NotACluster` for a CNF; every
    later step then ends skipped with the same result (no Tacker, OpenStack or SSH
    call), and steps expanded from such a result expand to none.
    """
    if isinstance(item, StepsFor):
        expand = item.expand
        return StepsFor(item.pattern, item.after, lambda r: () if not_a_cluster(r) else expand(r))
    run = item.run

    async def clusters_only(ctx: JobContext) -> Any:
        found = next((r for r in ctx.results.values() if not_a_cluster(r)), None)
        if found is not None:
            raise NotACluster("the VNF is not a cluster (see the parameters step)", found)
        return await run(ctx)

    return dataclasses.replace(item, run=clusters_only)
