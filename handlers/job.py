"""What a cluster step sees of its job: the :class:`ClusterJob`.

A :class:`ClusterJob` is created by a handler's ``plan`` (pure) and shared by
the plan's steps. What it learns from the outside world it learns inside a
step: the op-occ and the parameters (from Tacker; the parameters hold
passwords, so they stay in memory and are fetched again by the first step that
needs them after a restart; likewise the VIM's bearer token and the cluster's
join data), and the typed results of earlier steps, read through its accessors
(:meth:`ClusterJob.discovered`, :meth:`ClusterJob.access` ...), which the
reading step declares in its ``needs``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import SecretStr

from handlers.results import ClusterAccess, Discovered, VimRegistration
from handlers.toolkit import kubectl
from handlers.toolkit.kubeadm import JoinData
from handlers.toolkit.params import load_params
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import Topology
from schemas import Notification, VnfLcmOperationOccurrenceNotification
from schemas.cluster_params import K8sClusterInstallationParams
from schemas.hooks import hook_key
from schemas.lcm import api_version
from subscriber.config import ClusterSettings
from subscriber.errors import PermanentStepError
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
        self._instance: dict[str, Any] | None = None
        self._bearer_token: SecretStr | None = None
        self._join_data: JoinData | None = None

    async def op_occ(self, ctx: JobContext) -> dict[str, Any]:
        """``GET vnf_lcm_op_occs/{id}`` of the notification's op-occ (once per run)."""
        if self._op_occ is None:
            tacker = ctx.services.need_tacker()
            self._op_occ = await tacker.get_op_occ(self.notification.vnfLcmOpOccId, api=self.api)
        return self._op_occ

    async def hook_request(self, ctx: JobContext) -> dict[str, Any] | None:
        """The management-driver hook's request this job answers (``None``: no hook asked
        for this transition of the op-occ); see :mod:`schemas.hooks`."""
        n, values = self.notification, ctx.services.values
        if values is None:  # no store: nothing could have been asked through a hook
            return None
        raw = await values.get_value(hook_key(n.vnfLcmOpOccId, n.operationState.value))
        request: dict[str, Any] | None = json.loads(raw) if raw is not None else None
        return request

    async def instance(self, ctx: JobContext) -> dict[str, Any]:
        """The VNF instance (once per run): as Tacker holds it inside the operation when its
        hook asked for this job (Tacker writes its database only once the operation is
        over), else ``GET vnf_instances/{id}`` through the instance's own API."""
        if self._instance is None:
            request = await self.hook_request(ctx) if ctx.source == "hook" else None
            if ctx.source == "hook" and request is None:
                raise PermanentStepError(
                    f"the hook's request for op-occ {self.notification.vnfLcmOpOccId} is gone",
                    vnf_instance_id=ctx.vnf_instance_id,
                )
            if request is not None and request.get("vnfInstance"):
                self._instance = dict(request["vnfInstance"])
            else:  # a *_start point: Tacker's database still holds the instance it acts on
                tacker = ctx.services.need_tacker()
                self._instance = await tacker.get_vnf_instance(ctx.vnf_instance_id, api=self.api)
        return self._instance

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

    def remember_bearer_token(self, token: str) -> None:
        """Keep the VIM's bearer token (a secret) for this run's later steps, in memory only."""
        self._bearer_token = SecretStr(token)

    async def bearer_token(self, ctx: JobContext, *, step: str) -> SecretStr:
        """The VIM's bearer token: the one ``cluster-access`` read in this run, else (a
        resumed job) read from the main master again. Never stored."""
        if self._bearer_token is None:
            shell, topo = await self.shell(ctx), self.topology(ctx)
            token = await kubectl.read_bearer_token(
                shell, topo.main, wait=self.settings.token_wait_timeout, step=step
            )
            self._bearer_token = SecretStr(token)
        return self._bearer_token

    def remember_join_data(self, data: JoinData | None) -> None:
        """Keep (``None``: forget) the cluster's join data for this run's later joins, in
        memory only: a bootstrap token lives 24 h and a certificate key 2 h, a run minutes.
        A join that failed forgets it, so a retry asks a master for fresh data."""
        self._join_data = data

    def join_data(self, *, certificate_key: bool = False) -> JoinData | None:
        """The join data this run learned (from the init's report or an earlier join's
        request), if any; with ``certificate_key`` only when it holds one."""
        data = self._join_data
        if data is None or (certificate_key and data.certificate_key is None):
            return None
        return data

    async def vim_name(self, ctx: JobContext) -> str:
        return (await self.params(ctx)).vim_name_for(ctx.vnf_instance_id)

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
