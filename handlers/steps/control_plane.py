"""The cluster itself: kubeadm init and joins, the masters' haproxy, the user's Helm script.

INSTANTIATE inits the main master and joins the other masters one by one, then
every worker in parallel; HEAL converges the masters (a rebuilt one joins through
a surviving master, or, when none survives, the first inits a new cluster). Each
join step is skipped for a node that is already a member, so a rerun repeats
nothing. No result holds a secret: join tokens and certificate keys come from the
init's report or are fetched by the first join that needs them, and are kept in
the job's memory only, for the joins after it (a resumed job fetches them anew).
"""

from __future__ import annotations

import asyncio

from handlers.job import ClusterJob
from handlers.results import Confirmed, Discovered, InstallScript
from handlers.steps.package import package_files
from handlers.toolkit import haproxy, helm, kubeadm
from handlers.toolkit.install_report import InstallReport
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import Topology
from subscriber.errors import SkipStep, TransientStepError
from subscriber.kernel import JobContext, Step, StepResult, StepsFor
from subscriber.kernel.ports import ClusterNode

__all__ = [
    "converge_masters",
    "haproxy_backends",
    "init_main_master",
    "install_helm",
    "join_masters",
    "join_workers",
]


def _script(ctx: JobContext) -> str:
    """The install script as an error names it (``upload-scripts`` says which it is)."""
    made = ctx.result_if_made(InstallScript)
    return made.label if made is not None else "install_k8s_cluster.sh"


class MasterInit(StepResult):
    node: str
    server: str | None = None
    ssl_ca_cert_hash: str | None = None


def init_main_master(job: ClusterJob) -> StepsFor:
    """``init-master-<node>``: kubeadm init on the main master, unless it is a member."""

    def expand(found: Discovered) -> list[Step]:
        main = found.topology.main
        name = f"init-master-{main.name}"

        async def run(ctx: JobContext) -> MasterInit:
            shell = await job.shell(ctx)
            if await kubeadm.joined(shell, main, main):
                raise SkipStep(
                    f"{main.name} is already a member of the cluster", MasterInit(node=main.name)
                )
            report = await kubeadm.init_main_master(
                shell, job.topology(ctx), script=_script(ctx), step=name
            )
            await _joinable_after_init(job, shell, main, report)
            return MasterInit(
                node=main.name, server=report.server, ssl_ca_cert_hash=report.ssl_ca_cert_hash
            )

        timeout = job.settings.install_timeout + 60.0
        return [
            Step(
                name,
                run,
                idempotent=True,
                timeout=timeout,
                needs=(Discovered,),
                wants=(InstallScript,),
            )
        ]

    return StepsFor("init-master-<node>", Discovered, expand)


async def _joinable_after_init(
    job: ClusterJob, shell: NodeShell, main: ClusterNode, report: InstallReport
) -> None:
    """The new cluster's join data as its init printed it, for this run's joins (the
    data of any cluster before it is forgotten), once the cluster's bootstrap signer
    has signed its token: the first joins then need no second discovery try."""
    job.remember_join_data(
        kubeadm.JoinData(report.token, report.ssl_ca_cert_hash, report.certificate_key)
    )
    await kubeadm.await_signed(shell, main, report.token)


async def _join_control_plane(
    job: ClusterJob,
    shell: NodeShell,
    topo: Topology,
    node: ClusterNode,
    *,
    via: ClusterNode,
    step: str,
) -> None:
    """:func:`kubeadm.join_control_plane` with the join data this run already holds (no
    new token and no new upload of the certificates per master), kept for the next
    join; forgotten when the join fails, so a retry asks ``via`` afresh."""
    try:
        data = await kubeadm.join_control_plane(
            shell, topo, node, via=via, data=job.join_data(certificate_key=True), step=step
        )
    except BaseException:
        job.remember_join_data(None)
        raise
    job.remember_join_data(data)


class MasterJoined(StepResult):
    node: str
    joined: bool = False
    init: bool = False
    server: str | None = None
    via: str | None = None


def join_masters(job: ClusterJob) -> StepsFor:
    """``join-master-<node>`` per other master, one after another (HA control-plane joins)."""

    def one(node: ClusterNode) -> Step:
        name = f"join-master-{node.name}"

        async def run(ctx: JobContext) -> MasterJoined:
            shell, topo = await job.shell(ctx), job.topology(ctx)
            if await kubeadm.joined(shell, topo.main, node):
                raise SkipStep(
                    f"{node.name} is already a member of the cluster", MasterJoined(node=node.name)
                )
            await _join_control_plane(job, shell, topo, node, via=topo.main, step=name)
            return MasterJoined(node=node.name, joined=True)

        timeout = job.settings.install_timeout + 120.0
        return Step(name, run, idempotent=True, timeout=timeout, needs=(Discovered,))

    def expand(found: Discovered) -> list[Step]:
        return [one(m) for m in found.masters[1:]]

    return StepsFor("join-master-<node>", Discovered, expand)


def converge_masters(job: ClusterJob) -> StepsFor:
    """``join-master-<node>`` per master, in order: skipped when it is a member; else it
    joins the control plane through a surviving master, or, when none survives (a
    whole-VNF heal), the first one inits a new cluster and the others join it."""

    def one(node: ClusterNode) -> Step:
        name = f"join-master-{node.name}"

        async def run(ctx: JobContext) -> MasterJoined:
            shell, topo = await job.shell(ctx), job.topology(ctx)
            if await kubeadm.joined(shell, node, node):
                raise SkipStep(
                    f"{node.name} is a member of the cluster", MasterJoined(node=node.name)
                )
            via = await kubeadm.anchor(shell, topo, exclude={node.name})
            if via is None:
                report = await kubeadm.init_main_master(
                    shell, topo, main=node, script=_script(ctx), step=name
                )
                await _joinable_after_init(job, shell, node, report)
                return MasterJoined(node=node.name, init=True, server=report.server)
            await _join_control_plane(job, shell, topo, node, via=via, step=name)
            return MasterJoined(node=node.name, joined=True, via=via.name)

        timeout = job.settings.install_timeout + 120.0
        return Step(
            name, run, idempotent=True, timeout=timeout, needs=(Discovered,), wants=(InstallScript,)
        )

    def expand(found: Discovered) -> list[Step]:
        return [one(m) for m in found.masters]

    return StepsFor("join-master-<node>", Discovered, expand)


async def _installed_member(shell: NodeShell, found: kubeadm.Anchor, node: ClusterNode) -> bool:
    """:func:`kubeadm.joined` with the anchor's Node list: no kubectl call per node."""
    return node.name in found.members and await kubeadm.is_installed(shell, node)


class WorkersJoined(StepResult):
    joined: tuple[str, ...] = ()
    members: tuple[str, ...] = ()


def join_workers(job: ClusterJob) -> Step:
    """Every worker not yet a member joins, all at once (one step: steps run one by one).

    One failing worker fails the step after the others finished; the retry
    skips those already joined.
    """

    async def run(ctx: JobContext) -> WorkersJoined:
        shell, topo = await job.shell(ctx), job.topology(ctx)
        workers = topo.workers
        if not workers:
            raise SkipStep("no worker VNFCs", WorkersJoined())
        found = await kubeadm.survey(shell, topo)
        if found is None:
            raise TransientStepError("no master of the cluster is ready", step="join-workers")
        via = found.node
        # Members the anchor listed that also finished their install (as kubeadm.joined).
        done = await asyncio.gather(*(_installed_member(shell, found, w) for w in workers))
        members = tuple(w.name for w, ok in zip(workers, done, strict=True) if ok)
        todo = [w for w, ok in zip(workers, done, strict=True) if not ok]
        if not todo:
            raise SkipStep("every worker is already a member", WorkersJoined(members=members))
        data = job.join_data() or await kubeadm.join_data(shell, via, step="join-workers")
        job.remember_join_data(data)
        outcomes = await asyncio.gather(
            *(
                kubeadm.join_worker(shell, topo, w, data, via=via, step="join-workers")
                for w in todo
            ),
            return_exceptions=True,
        )
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        for error in errors:
            if not isinstance(error, Exception):
                raise error  # cancellation and the like
        if errors:
            job.remember_join_data(None)  # a retry asks for fresh join data
            failed = [w.name for w, o in zip(todo, outcomes, strict=True) if o is not None]
            first = next((e for e in errors if not getattr(e, "retriable", False)), errors[0])
            ctx.log.warning("worker joins failed", extra={"nodes": failed})
            raise first
        return WorkersJoined(joined=tuple(w.name for w in todo), members=members)

    timeout = job.settings.install_timeout + 120.0
    return Step("join-workers", run, idempotent=True, timeout=timeout, needs=(Discovered,))


class Backends(StepResult):
    changed: tuple[str, ...] = ()


def haproxy_backends(job: ClusterJob) -> Step:
    """HA: every master's haproxy sends API requests to exactly the cluster's masters."""

    async def run(ctx: JobContext) -> Backends:
        topo, shell = job.topology(ctx), await job.shell(ctx)
        if not topo.ha:
            raise SkipStep("one master: no haproxy", Backends())
        names = {m.name for m in topo.masters}
        changed = []
        for master in topo.masters:
            for other in topo.masters:
                if await haproxy.add_backend(shell, master, other, step="haproxy-backends"):
                    changed.append(f"{master.name}+{other.name}")
            for stale in set(await haproxy.backends(shell, master)) - names:
                if await haproxy.remove_backend(shell, master, stale, step="haproxy-backends"):
                    changed.append(f"{master.name}-{stale}")
        if not changed:
            raise SkipStep("every master's backends are the masters", Backends())
        return Backends(changed=tuple(changed))

    return Step("haproxy-backends", run, idempotent=True, timeout=120.0, needs=(Discovered,))


class HelmInstalled(StepResult):
    ran: tuple[str, ...] = ()
    already: tuple[str, ...] = ()
    path: str | None = None
    sha256: str | None = None


def install_helm(job: ClusterJob) -> Step:
    """The user's ``helm_installation_script_path``, read from the VNF package in Tacker,
    run on every master that has not run this very script (its marker on the node).

    Not idempotent: a user's script cut off midway is not run again blindly (the
    job fails and says so); masters that finished are skipped on any later run.
    """
    param = "helm_installation_script_path"

    async def run(ctx: JobContext) -> HelmInstalled:
        path = (await job.params(ctx)).helm_installation_script_path
        if not path:
            raise SkipStep(f"no {param} in the parameters", HelmInstalled())
        topo, shell = job.topology(ctx), await job.shell(ctx)
        script = (await package_files(job, ctx, {path: param}, step="install-helm"))[path]
        digest = helm.script_digest(script)
        done = await asyncio.gather(*(helm.installed(shell, m, digest) for m in topo.masters))
        before = tuple(m.name for m, ok in zip(topo.masters, done, strict=True) if ok)
        todo = [m for m, ok in zip(topo.masters, done, strict=True) if not ok]
        if not todo:
            raise SkipStep(
                "the Helm script already ran on every master",
                HelmInstalled(already=before, path=path, sha256=digest),
            )
        outcomes = await asyncio.gather(
            *(
                helm.run_helm_script(shell, topo, m, script, path=path, step="install-helm")
                for m in todo
            ),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return HelmInstalled(
            ran=tuple(m.name for m in todo), already=before, path=path, sha256=digest
        )

    return Step(
        "install-helm",
        run,
        idempotent=False,
        timeout=job.settings.helm_timeout + 120.0,
        needs=(Confirmed, Discovered),
    )
