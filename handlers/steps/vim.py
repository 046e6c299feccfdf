"""How the cluster is reached, told to Tacker: the admin token, the access data, the VIM,
the ``vimConnectionInfo`` write-back, and on TERMINATE their removal.

The bearer token is never stored: ``cluster-access`` stores the endpoint and CA
once the token controller filled the token (one command reads both) and keeps the
token in the job's memory for the steps that hand it to Tacker; a resumed job's
first such step reads it from the main master again.

The VIM's lifecycle is Tacker's v1 driver's (seeds 000 and 003): registered on
INSTANTIATE as ``vim_name`` or ``kubernetes_vim_<instance id>`` (a VIM of that name
is reused only when we registered it for this instance, never when it is someone
else's), registered anew after a whole-VNF heal (new CA and token), deleted on
TERMINATE whatever its name. ``tacker.register_vim`` says for which instances: by
default those of the v1 API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from handlers.job import ClusterJob
from handlers.results import ClusterAccess, Discovered, VimRegistration
from handlers.toolkit import kubectl
from schemas.lcm import operation_params
from subscriber.errors import SkipStep, TackerRejected
from subscriber.kernel import JobContext, Step, StepResult
from subscriber.kernel.ports import KubernetesAccess

__all__ = [
    "admin_token",
    "clear_write_back",
    "cluster_access",
    "delete_vim",
    "register_vim",
    "reregister_vim",
    "write_back",
]


class AdminToken(StepResult):
    secret: str = kubectl.TOKEN_SECRET


def admin_token(job: ClusterJob) -> Step:
    """The service-account-token Secret the VIM's bearer token comes from (v2 approach)."""

    async def run(ctx: JobContext) -> AdminToken:
        shell, topo = await job.shell(ctx), job.topology(ctx)
        if not await kubectl.ensure_admin_token(shell, topo.main, step="admin-token"):
            raise SkipStep(f"Secret {kubectl.TOKEN_SECRET} exists", AdminToken())
        return AdminToken()

    return Step("admin-token", run, idempotent=True, timeout=120.0, needs=(Discovered,))


def cluster_access(job: ClusterJob) -> Step:
    """The endpoint and CA the VIM is told, once the token controller filled the token."""

    async def run(ctx: JobContext) -> ClusterAccess:
        shell, topo = await job.shell(ctx), job.topology(ctx)
        # The token ready before anyone is told; kept in memory for the steps that tell.
        pem, token = await kubectl.read_access(
            shell, topo.main, wait=job.settings.token_wait_timeout, step="cluster-access"
        )
        job.remember_bearer_token(token)
        return ClusterAccess(endpoint=topo.endpoint, ssl_ca_cert=pem)

    return Step(
        ClusterAccess.step,
        run,
        idempotent=True,
        timeout=job.settings.token_wait_timeout + 60,
        needs=(Discovered,),
        makes=ClusterAccess,
    )


async def _access(
    job: ClusterJob, ctx: JobContext, step: str, vim: VimRegistration | None = None
) -> KubernetesAccess:
    known = job.access(ctx)
    return KubernetesAccess(
        endpoint=known.endpoint,
        ssl_ca_cert=known.ssl_ca_cert,
        bearer_token=await job.bearer_token(ctx, step=step),
        vim_id=vim.vim_id if vim is not None else None,
    )


def register_vim(job: ClusterJob) -> Step:
    """``POST /v1.0/vims`` when registration is on for the instance's API (by default v1,
    as Tacker's v1 driver did); a VIM of ours already there for the endpoint is kept."""

    async def run(ctx: JobContext) -> VimRegistration:
        return await _register(job, ctx, replace=False)

    return _registration_step(run)


def _registration_step(run: Callable[[JobContext], Awaitable[VimRegistration]]) -> Step:
    """The ``register-vim`` step (INSTANTIATE's, or HEAL's that registers anew)."""
    return Step(
        VimRegistration.step,
        run,
        idempotent=True,
        timeout=120.0,
        needs=(Discovered, ClusterAccess),
        makes=VimRegistration,
    )


async def _register(job: ClusterJob, ctx: JobContext, *, replace: bool) -> VimRegistration:
    name = await job.vim_name(ctx)
    tacker = ctx.services.need_tacker()
    access = await _access(job, ctx, VimRegistration.step)
    vim_id = await tacker.register_vim(
        name, access, owner=ctx.vnf_instance_id, api=job.api, replace=replace
    )
    if vim_id is None:
        raise SkipStep(f"VIM registration is off for {job.api} instances", VimRegistration())
    return VimRegistration(vim_id=vim_id, vim_name=name)


async def whole_vnf_heal(job: ClusterJob, ctx: JobContext) -> bool:
    """Whether the HEAL request named no VNFC: the whole VNF was rebuilt (v1, SOL003)."""
    request = operation_params(await job.op_occ(ctx))
    return not request.get("vnfcInstanceId")


def reregister_vim(job: ClusterJob) -> Step:
    """HEAL: after a whole-VNF heal the cluster is new (CA, token): its VIM is registered
    anew, as Tacker's driver's ``heal_end`` reruns ``instantiate_end``. A heal of some
    VNFCs keeps the cluster, and the VIM is left as it is."""

    async def run(ctx: JobContext) -> VimRegistration:
        if not await whole_vnf_heal(job, ctx):
            raise SkipStep("the heal kept the cluster: its VIM stays", VimRegistration())
        return await _register(job, ctx, replace=True)

    return _registration_step(run)


def has_entry(
    instance: dict[str, Any], endpoint: str, ca: str | None, vim_id: str | None = None
) -> bool:
    """Whether ``vimConnectionInfo`` already holds our entry for ``endpoint`` and ``ca``
    (and, v1, the VIM ``vim_id``).

    An entry for the endpoint that names another CA, or another VIM, is a cluster built
    before (a whole-VNF heal keeps the addresses but makes a new CA and token): not ours.
    """
    info = instance.get("vimConnectionInfo") or {}
    entries = info.values() if isinstance(info, dict) else info
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        interface = entry.get("interfaceInfo") or {}
        access = entry.get("accessInfo") or {}
        if endpoint not in (interface.get("endpoint"), access.get("authUrl")):
            continue
        if vim_id is not None and entry.get("vimId") != vim_id:
            continue
        known = interface.get("ssl_ca_cert")
        if not ca or not known or known.strip() == ca.strip():
            return True
    return False


class WrittenBack(StepResult):
    endpoint: str
    modify_op_occ_id: str | None = None
    handed_back: bool = False  # to the op-occ's hook, not PATCHed


def write_back(job: ClusterJob) -> Step:
    """Our entry into ``vimConnectionInfo`` (skipped when already there): PATCHed, or, when a
    management-driver hook asked for the job, handed back to it, for its script to return
    to Tacker inside the operation (Tacker refuses a PATCH while the op-occ runs)."""

    async def run(ctx: JobContext) -> WrittenBack:
        endpoint = job.access(ctx).endpoint
        instance = await job.instance(ctx)
        vim = job.vim(ctx)
        if has_entry(instance, endpoint, job.access(ctx).ssl_ca_cert, vim.vim_id if vim else None):
            raise SkipStep(
                f"vimConnectionInfo already has {endpoint}", WrittenBack(endpoint=endpoint)
            )
        access = await _access(job, ctx, "write-back", job.vim(ctx))
        if ctx.source == "hook" and job.api == "v2":
            occ = job.notification.vnfLcmOpOccId
            await ctx.services.need_answers().hand_back(occ, ctx.vnf_instance_id, access)
            return WrittenBack(endpoint=endpoint, handed_back=True)
        occ_id = await ctx.services.need_tacker().write_back(
            ctx.vnf_instance_id, access, api=job.api
        )
        return WrittenBack(endpoint=endpoint, modify_op_occ_id=occ_id)

    return Step(
        "write-back",
        run,
        idempotent=True,
        timeout=300.0,
        needs=(Discovered, ClusterAccess),
        wants=(VimRegistration,),
    )


class VimDeleted(StepResult):
    vim_name: str
    deleted: tuple[str, ...] = ()


def delete_vim(job: ClusterJob) -> Step:
    """TERMINATE: the VIMs we registered for this instance, whatever their name (the
    INSTANTIATE parameters' ``vim_name`` too); a VIM of that name that is someone
    else's fails the step and is never deleted."""

    async def run(ctx: JobContext) -> VimDeleted:
        name = await job.vim_name(ctx)
        deleted = await ctx.services.need_tacker().delete_vim(
            name, owner=ctx.vnf_instance_id, api=job.api
        )
        if not deleted:
            raise SkipStep(f"no VIM of ours for {ctx.vnf_instance_id}", VimDeleted(vim_name=name))
        return VimDeleted(vim_name=name, deleted=tuple(deleted))

    return Step("delete-vim", run, idempotent=True, timeout=120.0)


class WriteBackCleared(StepResult):
    api: str
    cleared: bool = False


def clear_write_back(job: ClusterJob) -> Step:
    """TERMINATE, v1 only: blank our ``vimConnectionInfo`` entry of an instance still
    INSTANTIATED. Tacker (v1 and v2) resets vimConnectionInfo itself when TERMINATE
    completes, and refuses ``vimConnectionInfo`` in a PATCH to a NOT_INSTANTIATED
    instance: then nothing is sent."""

    async def run(ctx: JobContext) -> WriteBackCleared:
        if job.api == "v2":
            raise SkipStep(
                "Tacker v2 resets vimConnectionInfo at TERMINATE", WriteBackCleared(api=job.api)
            )
        try:
            instance = await job.instance(ctx)
        except TackerRejected as exc:
            if exc.status != 404:
                raise
            instance = {}
        if instance.get("instantiationState") != "INSTANTIATED":
            raise SkipStep(
                "the instance is not instantiated: Tacker reset its vimConnectionInfo",
                WriteBackCleared(api=job.api),
            )
        await ctx.services.need_tacker().clear_write_back(ctx.vnf_instance_id, api=job.api)
        return WriteBackCleared(api=job.api, cleared=True)

    return Step("clear-write-back", run, idempotent=True, timeout=300.0)
