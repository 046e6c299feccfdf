"""What a cluster step sees of its job: the :class:`ClusterJob`.

A :class:`ClusterJob` is created by a handler's ``plan`` (pure) and shared by
the plan's steps. What it learns from the outside world it learns inside a
step: the op-occ and the parameters (from Tacker; the parameters hold
passwords, so they stay in memory and are fetched again by the first step that
needs them after a restart), and the typed results of earlier steps, read
through its accessors (:meth:`ClusterJob.discovered`, :meth:`ClusterJob.access`
...), which the reading step declares in its ``needs``.
"""

from __future__ import annotations

from typing import Any

from handlers.results import ClusterAccess, Discovered, VimRegistration
from handlers.toolkit.params import load_params
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import Topology
from schemas import Notification, VnfLcmOperationOccurrenceNotification
from schemas.cluster_params import K8sClusterInstallationParams
from schemas.lcm import api_version
from subscriber.config import ClusterSettings
from subscriber.kernel import JobContext
from subscriber.kernel.ports import ApiVersion

__all__ = ["ClusterJob"]


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
        self._op_occ: dict[str, Any] | None = None
        self._params: K8sClusterInstallationParams | None = None

    async def op_occ(self, ctx: JobContext) -> dict[str, Any]:
        """``GET vnf_lcm_op_occs/{id}`` of the notification's op-occ (once per run)."""
        if self._op_occ is None:
            tacker = ctx.services.need_tacker()
            self._op_occ = await tacker.get_op_occ(self.notification.vnfLcmOpOccId, api=self.api)
        return self._op_occ

    async def params(self, ctx: JobContext) -> K8sClusterInstallationParams:
        """The operation's parameters (fetched from Tacker once per run)."""
        if self._params is None:
            self._params = await load_params(
                ctx.services.need_tacker(), self.notification, await self.op_occ(ctx)
            )
        return self._params

    async def shell(self, ctx: JobContext) -> NodeShell:
        """Root shells on the nodes with this operation's credentials."""
        return NodeShell(ctx.services.need_ssh(), self.settings, await self.params(ctx))

    async def vim_name(self, ctx: JobContext) -> str:
        return (await self.params(ctx)).vim_name_for(ctx.vnf_instance_id)

    async def instance(self, ctx: JobContext) -> dict[str, Any]:
        """``GET vnf_instances/{id}`` now, through the instance's own API."""
        return await ctx.services.need_tacker().get_vnf_instance(ctx.vnf_instance_id, api=self.api)

    def discovered(self, ctx: JobContext) -> Discovered:
        """The ``discover`` step's result (the step ``needs`` :class:`Discovered`)."""
        return ctx.result(Discovered)

    def topology(self, ctx: JobContext) -> Topology:
        """The cluster as the ``discover`` step found it."""
        return self.discovered(ctx).topology

    def access(self, ctx: JobContext) -> ClusterAccess:
        """The ``cluster-access`` step's endpoint and CA."""
        return ctx.result(ClusterAccess)

    def vim(self, ctx: JobContext) -> VimRegistration | None:
        """The VIM ``register-vim`` registered, when the plan has that step (``wants``)."""
        return ctx.result_if_made(VimRegistration)
