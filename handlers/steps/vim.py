"""How the cluster is reached, told to Tacker: the admin token, the access data, the VIM,
the ``vimConnectionInfo`` write-back, and on TERMINATE their removal.

The bearer token is never stored: ``cluster-access`` stores the endpoint and CA
once the token controller filled the token, and the steps that hand the token
to Tacker read it from the main master again.
"""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from handlers.job import ClusterJob
from handlers.results import ClusterAccess, Discovered, VimRegistration
from handlers.toolkit import kubectl
from subscriber.errors import SkipStep
from subscriber.kernel import JobContext, Step, StepResult
from subscriber.kernel.ports import KubernetesAccess

__all__ = [
    "admin_token",
    "clear_write_back",
    "cluster_access",
    "delete_vim",
    "register_vim",
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
        pem = await kubectl.read_ca_cert(shell, topo.main, step="cluster-access")
        # Ready before anyone is told.
        await kubectl.read_bearer_token(
            shell, topo.main, wait=job.settings.token_wait_timeout, step="cluster-access"
        )
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
    shell, topo = await job.shell(ctx), job.topology(ctx)
    token = await kubectl.read_bearer_token(
        shell, topo.main, wait=job.settings.token_wait_timeout, step=step
    )
    return KubernetesAccess(
        endpoint=known.endpoint,
        ssl_ca_cert=known.ssl_ca_cert,
        bearer_token=SecretStr(token),
        vim_id=vim.vim_id if vim is not None else None,
    )


def register_vim(job: ClusterJob) -> Step:
    """``POST /v1.0/vims`` when the Tacker client has registration on (v1's driver did)."""

    async def run(ctx: JobContext) -> VimRegistration:
        name = await job.vim_name(ctx)
        tacker = ctx.services.need_tacker()
        access = await _access(job, ctx, "register-vim")
        vim_id = await tacker.register_vim(name, access, owner=ctx.vnf_instance_id)
        if vim_id is None:
            raise SkipStep("VIM registration is off", VimRegistration())
        return VimRegistration(vim_id=vim_id, vim_name=name)

    return Step(
        VimRegistration.step,
        run,
        idempotent=True,
        timeout=120.0,
        needs=(Discovered, ClusterAccess),
        makes=VimRegistration,
    )


def has_entry(instance: dict[str, Any], endpoint: str, ca: str | None) -> bool:
    """Whether ``vimConnectionInfo`` already holds our entry for ``endpoint`` and ``ca``.

    An entry for the endpoint that names another CA is a cluster built before
    (a whole-VNF heal keeps the addresses but makes a new CA and token): not ours.
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
        known = interface.get("ssl_ca_cert")
        if not ca or not known or known.strip() == ca.strip():
            return True
    return False


class WrittenBack(StepResult):
    endpoint: str
    modify_op_occ_id: str | None = None


def write_back(job: ClusterJob) -> Step:
    """PATCH our entry into ``vimConnectionInfo`` (skipped when already there)."""

    async def run(ctx: JobContext) -> WrittenBack:
        tacker = ctx.services.need_tacker()
        endpoint = job.access(ctx).endpoint
        instance = await tacker.get_vnf_instance(ctx.vnf_instance_id)
        if has_entry(instance, endpoint, job.access(ctx).ssl_ca_cert):
            raise SkipStep(
                f"vimConnectionInfo already has {endpoint}", WrittenBack(endpoint=endpoint)
            )
        access = await _access(job, ctx, "write-back", job.vim(ctx))
        occ_id = await tacker.write_back(ctx.vnf_instance_id, access, api=job.api)
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
    deleted: bool = False


def delete_vim(job: ClusterJob) -> Step:
    """TERMINATE: the VIM we registered for this instance, by the name INSTANTIATE used, if
    there is one (a same-named VIM we did not register for it is never deleted)."""

    async def run(ctx: JobContext) -> VimDeleted:
        name = await job.vim_name(ctx)
        if not await ctx.services.need_tacker().delete_vim(name, owner=ctx.vnf_instance_id):
            raise SkipStep(f"no VIM named {name}", VimDeleted(vim_name=name))
        return VimDeleted(vim_name=name, deleted=True)

    return Step("delete-vim", run, idempotent=True, timeout=120.0)


class WriteBackCleared(StepResult):
    api: str
    cleared: bool = False


def clear_write_back(job: ClusterJob) -> Step:
    """TERMINATE, v1 only: remove our ``vimConnectionInfo`` entry. Tacker v2 resets
    vimConnectionInfo itself at TERMINATE and refuses a PATCH during and after it."""

    async def run(ctx: JobContext) -> WriteBackCleared:
        if job.api == "v2":
            raise SkipStep(
                "Tacker v2 resets vimConnectionInfo at TERMINATE", WriteBackCleared(api=job.api)
            )
        await ctx.services.need_tacker().clear_write_back(ctx.vnf_instance_id, api=job.api)
        return WriteBackCleared(api=job.api, cleared=True)

    return Step("clear-write-back", run, idempotent=True, timeout=300.0)
