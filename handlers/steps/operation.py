"""The operation itself: confirmed with Tacker, then its parameters.

``confirm`` is the first step of every cluster plan (see
:class:`~handlers.handler.ClusterHandler`): a notification is a claim and Tacker
is the truth. The op-occ read from Tacker must name the notification's VNF
instance and operation, and for a settled state (COMPLETED, FAILED_TEMP, FAILED,
ROLLED_BACK) that state; the instance must exist for our credentials (after a
TERMINATE it may already be deleted). Anything else rejects the event
(:class:`~subscriber.errors.EventRejected`): it is stored as ``rejected`` with
the reason and never runs.

An event our hook endpoint made (source ``hook``, :mod:`schemas.hooks`) claims
less: that Tacker runs the package's script for it, inside the operation. Tacker
confirms it when the op-occ is past STARTING (PROCESSING while the script runs,
FAILED_TEMP once the script gave up). A COMPLETED that Tacker sends for an op-occ
whose hook ran its job (a retried operation's) ends here: the job ran once.
"""

from __future__ import annotations

from typing import Any

from handlers.job import ClusterJob
from handlers.results import Confirmed
from schemas import LcmOperationStateType, LcmOperationType
from schemas.cluster_params import K8sClusterInstallationParams
from subscriber.errors import EndJob, EventRejected, TackerRejected
from subscriber.kernel import JobContext, Step, StepResult
from subscriber.kernel.ports import ApiVersion

__all__ = ["ParamsSummary", "confirm", "load_params"]

# States an op-occ stays in once reached (until an operator acts): a notification that
# claims one must find the op-occ in it. STARTING, PROCESSING and ROLLING_BACK pass
# quickly, so Tacker may be past them when we ask.
_SETTLED = frozenset(
    {
        LcmOperationStateType.COMPLETED,
        LcmOperationStateType.FAILED_TEMP,
        LcmOperationStateType.FAILED,
        LcmOperationStateType.ROLLED_BACK,
    }
)


# The transition Tacker notifies only after the hook's script returned: another event of it
# is Tacker's word on a job the hook already ran.
_AFTER_SCRIPT = LcmOperationStateType.COMPLETED


def _missing(exc: TackerRejected) -> bool:
    return getattr(exc, "status", None) == 404


def confirm(job: ClusterJob) -> Step:
    """Tacker's op-occ and instance confirm the notification, else the event is rejected."""

    async def run(ctx: JobContext) -> Confirmed:
        n = job.notification
        occ_id, instance_id = n.vnfLcmOpOccId, n.vnfInstanceId
        try:
            occ = await job.op_occ(ctx)
        except TackerRejected as exc:
            if _missing(exc):
                raise EventRejected(f"Tacker has no op-occ {occ_id}") from None
            raise
        state = str(occ.get("operationState") or "")
        hook = await job.hook_request(ctx)
        by_hook = ctx.source == "hook"
        if by_hook and hook is None:
            raise EventRejected(f"no hook request is kept for op-occ {occ_id}: nothing asked")
        problems = []
        if occ.get("vnfInstanceId") != instance_id:
            problems.append(f"it belongs to VNF instance {occ.get('vnfInstanceId')!s:.64}")
        if occ.get("operation") != n.operation.value:
            problems.append(f"its operation is {occ.get('operation')!s:.32}")
        if by_hook and state == LcmOperationStateType.STARTING.value:
            problems.append("it is STARTING, before any script runs")
        elif not by_hook and n.operationState in _SETTLED and state != n.operationState.value:
            problems.append(f"it is {state:.32}")
        if problems:
            claim = (
                f"the hook claims its script runs for op-occ {occ_id} ({n.operation.value})"
                if by_hook
                else f"the notification claims op-occ {occ_id} is {n.operation.value} "
                f"{n.operationState.value}"
            )
            raise EventRejected(
                f"{claim} of VNF instance {instance_id}, but Tacker says " + " and ".join(problems)
            )
        try:
            instance: dict[str, Any] = await ctx.services.need_tacker().get_vnf_instance(
                instance_id, api=job.api
            )
        except TackerRejected as exc:
            if not _missing(exc):
                raise
            if n.operation is not LcmOperationType.TERMINATE:
                raise EventRejected(f"Tacker has no VNF instance {instance_id}") from None
            instance = {}  # deleted right after its TERMINATE: the op-occ vouches for it
        confirmed = Confirmed(
            operation=n.operation.value,
            operation_state=state,
            api=job.api,
            vnfd_id=instance.get("vnfdId"),
            instantiation_state=instance.get("instantiationState"),
            hook=hook.get("point") if hook is not None and by_hook else None,
        )
        if hook is not None and not by_hook and n.operationState is _AFTER_SCRIPT:
            raise EndJob(
                f"op-occ {occ_id}'s job ran when its {hook.get('point')} hook asked for it",
                confirmed,
            )
        return confirmed

    return Step("confirm", run, idempotent=True, timeout=60.0, makes=Confirmed)


class ParamsSummary(StepResult):
    """What may be stored of the parameters: nothing that logs in anywhere."""

    api: str | None = None
    master_vdu: str | None = None
    worker_vdu: str | None = None
    pod_cidr: str | None = None
    service_cidr: str | None = None

    @classmethod
    def of(cls, params: K8sClusterInstallationParams, api: ApiVersion) -> ParamsSummary:
        return cls(
            api=api,
            master_vdu=params.master_node.vdu_id,
            worker_vdu=params.worker_node.vdu_id,
            pod_cidr=params.pod_cidr,
            service_cidr=params.service_cidr,
        )


def load_params(job: ClusterJob, name: str = "load-params") -> Step:
    """Fetch and validate the operation's parameters; store what is not secret.

    A CNF (no parameters, deployed on Kubernetes) ends the job here
    (:class:`~subscriber.errors.NotACluster`).
    """

    async def run(ctx: JobContext) -> ParamsSummary:
        return ParamsSummary.of(await job.params(ctx), job.api)

    return Step(name, run, idempotent=True, timeout=60.0)
