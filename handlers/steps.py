"""Named, checkpointed steps shared by the cluster plans, each wrapping toolkit calls.

Every step is convergent: it reads the cluster first and changes only what
differs, so a replay is a no-op and a resumed job picks up where it stopped.
No step result holds a secret: join tokens, certificate keys and the bearer
token are fetched by the step that needs them and kept in memory only.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import SecretStr

from handlers.job import DISCOVER, ClusterJob
from handlers.toolkit import hosts, kubeadm, kubectl
from handlers.toolkit.params import params_summary
from handlers.toolkit.topology import Topology, discover
from subscriber.errors import PermanentStepError, SkipStep
from subscriber.kernel import JobContext, Step, StepsFor
from subscriber.kernel.ports import ClusterNode, KubernetesAccess

__all__ = [
    "admin_token",
    "cluster_access",
    "configure_hosts",
    "discover_nodes",
    "init_main_master",
    "join_masters",
    "join_workers",
    "load_params",
    "register_vim",
    "upload_scripts",
    "write_back",
]


def load_params(job: ClusterJob, name: str = "load-params") -> Step:
    """Fetch and validate the operation's parameters; store what is not secret."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        return params_summary(await job.params(ctx), job.api)

    return Step(name, run, idempotent=True, timeout=60.0)


def discover_nodes(job: ClusterJob) -> Step:
    """The instance's nodes from Tacker's VNFCs, Heat's ports and Nova; saved as inventory."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        tacker = ctx.services.need_tacker()
        instance = await tacker.get_vnf_instance(ctx.vnf_instance_id)
        state = instance.get("instantiationState")
        if state not in (None, "INSTANTIATED"):
            raise PermanentStepError(
                f"VNF instance {ctx.vnf_instance_id} is {state}, not INSTANTIATED", step=DISCOVER
            )
        topo = await discover(instance, await job.params(ctx), ctx.services.need_openstack())
        await ctx.services.need_inventory().replace(ctx.vnf_instance_id, topo.nodes)
        return topo.as_json()

    return Step(DISCOVER, run, idempotent=True, timeout=120.0)


def upload_scripts(job: ClusterJob) -> Step:
    async def run(ctx: JobContext) -> dict[str, Any]:
        topo = job.topology(ctx)
        await hosts.upload_scripts(await job.shell(ctx), topo.nodes)
        return {"nodes": [n.name for n in topo.nodes]}

    return Step("upload-scripts", run, idempotent=True, timeout=300.0)


def configure_hosts(job: ClusterJob) -> Step:
    """Hostname and the /etc/hosts block of every node, on every node."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        topo, shell = job.topology(ctx), await job.shell(ctx)
        await asyncio.gather(
            *(hosts.write_hosts(shell, n, topo.nodes, step="configure-hosts") for n in topo.nodes)
        )
        return {"hosts": {n.name: n.nic_ip for n in topo.nodes}}

    return Step("configure-hosts", run, idempotent=True, timeout=120.0)


def init_main_master(job: ClusterJob) -> StepsFor:
    """``init-master-<node>``: kubeadm init on the main master, unless it is a member."""

    def expand(found: dict[str, Any]) -> list[Step]:
        main = Topology.from_json(found).main
        name = f"init-master-{main.name}"

        async def run(ctx: JobContext) -> dict[str, Any]:
            shell = await job.shell(ctx)
            if await kubeadm.joined(shell, main, main):
                raise SkipStep(
                    f"{main.name} is already a member of the cluster", {"node": main.name}
                )
            report = await kubeadm.init_main_master(shell, job.topology(ctx), step=name)
            return {
                "node": main.name,
                "server": report.server,
                "sslCaCertHash": report.ssl_ca_cert_hash,
            }

        return [Step(name, run, idempotent=True, timeout=job.settings.install_timeout + 60.0)]

    return StepsFor("init-master-<node>", DISCOVER, expand)


def join_masters(job: ClusterJob) -> StepsFor:
    """``join-master-<node>`` per other master, one after another (HA control-plane joins)."""

    def one(node: ClusterNode) -> Step:
        name = f"join-master-{node.name}"

        async def run(ctx: JobContext) -> dict[str, Any]:
            shell, topo = await job.shell(ctx), job.topology(ctx)
            if await kubeadm.joined(shell, topo.main, node):
                raise SkipStep(
                    f"{node.name} is already a member of the cluster", {"node": node.name}
                )
            await kubeadm.join_control_plane(shell, topo, node, step=name)
            return {"node": node.name, "joined": True}

        return Step(name, run, idempotent=True, timeout=job.settings.install_timeout + 120.0)

    def expand(found: dict[str, Any]) -> list[Step]:
        return [one(m) for m in Topology.from_json(found).masters[1:]]

    return StepsFor("join-master-<node>", DISCOVER, expand)


def join_workers(job: ClusterJob) -> Step:
    """Every worker not yet a member joins, all at once (one step: steps run one by one).

    One failing worker fails the step after the others finished; the retry
    skips those already joined.
    """

    async def run(ctx: JobContext) -> dict[str, Any]:
        shell, topo = await job.shell(ctx), job.topology(ctx)
        workers = topo.workers
        if not workers:
            raise SkipStep("no worker VNFCs", {"joined": [], "members": []})
        done = await asyncio.gather(*(kubeadm.joined(shell, topo.main, w) for w in workers))
        members = [w.name for w, ok in zip(workers, done, strict=True) if ok]
        todo = [w for w, ok in zip(workers, done, strict=True) if not ok]
        if not todo:
            raise SkipStep("every worker is already a member", {"joined": [], "members": members})
        data = await kubeadm.join_data(shell, topo.main, step="join-workers")
        outcomes = await asyncio.gather(
            *(kubeadm.join_worker(shell, topo, w, data, step="join-workers") for w in todo),
            return_exceptions=True,
        )
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        for error in errors:
            if not isinstance(error, Exception):
                raise error  # cancellation and the like
        if errors:
            failed = [w.name for w, o in zip(todo, outcomes, strict=True) if o is not None]
            first = next((e for e in errors if not getattr(e, "retriable", False)), errors[0])
            ctx.log.warning("worker joins failed", extra={"nodes": failed})
            raise first
        return {"joined": [w.name for w in todo], "members": members}

    return Step("join-workers", run, idempotent=True, timeout=job.settings.install_timeout + 120.0)


def admin_token(job: ClusterJob) -> Step:
    """The service-account-token Secret the VIM's bearer token comes from (v2 approach)."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        shell, topo = await job.shell(ctx), job.topology(ctx)
        if not await kubectl.ensure_admin_token(shell, topo.main, step="admin-token"):
            raise SkipStep(
                f"Secret {kubectl.TOKEN_SECRET} exists", {"secret": kubectl.TOKEN_SECRET}
            )
        return {"secret": kubectl.TOKEN_SECRET}

    return Step("admin-token", run, idempotent=True, timeout=120.0)


def cluster_access(job: ClusterJob) -> Step:
    """The endpoint and CA the VIM is told, once the token controller filled the token."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        shell, topo = await job.shell(ctx), job.topology(ctx)
        pem = await kubectl.read_ca_cert(shell, topo.main, step="cluster-access")
        # Ready before anyone is told.
        await kubectl.read_bearer_token(
            shell, topo.main, wait=job.settings.token_wait_timeout, step="cluster-access"
        )
        return {"endpoint": topo.endpoint, "sslCaCert": pem}

    return Step(
        "cluster-access", run, idempotent=True, timeout=job.settings.token_wait_timeout + 60
    )


async def _access(job: ClusterJob, ctx: JobContext, step: str) -> KubernetesAccess:
    known = ctx.results.get("cluster-access") or {}
    vim = ctx.results.get("register-vim") or {}
    shell, topo = await job.shell(ctx), job.topology(ctx)
    token = await kubectl.read_bearer_token(
        shell, topo.main, wait=job.settings.token_wait_timeout, step=step
    )
    return KubernetesAccess(
        endpoint=str(known.get("endpoint") or topo.endpoint),
        ssl_ca_cert=str(known.get("sslCaCert") or ""),
        bearer_token=SecretStr(token),
        vim_id=vim.get("vimId"),
    )


def register_vim(job: ClusterJob) -> Step:
    """``POST /v1.0/vims`` when the Tacker client has registration on (v1's driver did)."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        name = await job.vim_name(ctx)
        tacker = ctx.services.need_tacker()
        vim_id = await tacker.register_vim(name, await _access(job, ctx, "register-vim"))
        if vim_id is None:
            raise SkipStep("VIM registration is off", {"vimId": None, "vimName": None})
        return {"vimId": vim_id, "vimName": name}

    return Step("register-vim", run, idempotent=True, timeout=120.0)


def _has_entry(instance: dict[str, Any], endpoint: str) -> bool:
    """Whether ``vimConnectionInfo`` already holds a Kubernetes entry for ``endpoint``."""
    info = instance.get("vimConnectionInfo") or {}
    entries = info.values() if isinstance(info, dict) else info
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        interface = entry.get("interfaceInfo") or {}
        access = entry.get("accessInfo") or {}
        if endpoint in (interface.get("endpoint"), access.get("authUrl")):
            return True
    return False


def write_back(job: ClusterJob) -> Step:
    """PATCH our entry into ``vimConnectionInfo`` (skipped when already there)."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        tacker = ctx.services.need_tacker()
        endpoint = job.topology(ctx).endpoint
        instance = await tacker.get_vnf_instance(ctx.vnf_instance_id)
        if _has_entry(instance, endpoint):
            raise SkipStep(f"vimConnectionInfo already has {endpoint}", {"endpoint": endpoint})
        access = await _access(job, ctx, "write-back")
        occ_id = await tacker.write_back(ctx.vnf_instance_id, access, api=job.api)
        return {"endpoint": endpoint, "modifyOpOccId": occ_id}

    return Step("write-back", run, idempotent=True, timeout=300.0)
