"""The nodes themselves: who they are (``discover``), and what each gets on every node
the operation builds (scripts, ``/etc/hosts``, proxy, labels).

Every step is convergent: it reads the node first and changes only what differs,
so a replay is a no-op and a resumed job picks up where it stopped.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from handlers.job import ClusterJob
from handlers.results import Confirmed, Discovered, InstallScript, Membership
from handlers.steps.package import optional_package_file
from handlers.toolkit import hosts, kubeadm, kubectl, proxy
from handlers.toolkit.topology import discover
from subscriber.errors import PermanentStepError, SkipStep, TransientStepError
from subscriber.kernel import JobContext, Step, StepResult
from subscriber.kernel.ports import ClusterNode

__all__ = [
    "HOST_LABEL",
    "ZONE_LABEL",
    "configure_hosts",
    "configure_proxy",
    "discover_nodes",
    "label_workers",
    "survey_nodes",
    "upload_scripts",
]

ZONE_LABEL = "topology.kubernetes.io/zone"
HOST_LABEL = "CIS-node"  # Tacker's pod-affinity label: the worker's compute host


def discover_nodes(job: ClusterJob) -> Step:
    """The instance's nodes from Tacker's VNFCs (as its hook saw them, when one asked for
    the job), Heat's ports and Nova; saved as inventory."""

    async def run(ctx: JobContext) -> Discovered:
        instance = await job.instance(ctx)
        state = instance.get("instantiationState")
        if state not in (None, "INSTANTIATED"):
            raise PermanentStepError(
                f"VNF instance {ctx.vnf_instance_id} is {state}, not INSTANTIATED",
                step=Discovered.step,
            )
        topo = await discover(instance, await job.params(ctx), ctx.services.need_openstack())
        await ctx.services.need_inventory().replace(ctx.vnf_instance_id, topo.nodes)
        return Discovered.of(topo)

    return Step(Discovered.step, run, idempotent=True, timeout=120.0, makes=Discovered)


def survey_nodes(job: ClusterJob) -> Step:
    """The nodes now (Tacker's VNFCs, Heat, Nova) and how they differ from the inventory.

    The inventory is not changed here (``reconcile-membership`` does it last), so
    a rerun of this step after a crash computes the same differences.
    """

    async def run(ctx: JobContext) -> Discovered:
        instance = await job.instance(ctx)
        topo = await discover(instance, await job.params(ctx), ctx.services.need_openstack())
        before = {n.name: n for n in await ctx.services.need_inventory().nodes(ctx.vnf_instance_id)}
        now = {n.name: n for n in topo.nodes}
        changes = Membership(
            added=tuple(sorted(set(now) - set(before))),
            replaced=tuple(sorted(n for n in now if n in before and _rebuilt(before[n], now[n]))),
            departed=tuple(before[n] for n in sorted(set(before) - set(now))),
        )
        return Discovered.of(topo, changes)

    return Step(Discovered.step, run, idempotent=True, timeout=120.0, makes=Discovered)


def _rebuilt(before: ClusterNode, now: ClusterNode) -> bool:
    """A new VM under a node's name: v2 gives a healed VNFC a new id, v1 keeps the id and
    shows the new Nova server."""
    if before.vnfc_id != now.vnfc_id:
        return True
    return bool(before.server_id and now.server_id and before.server_id != now.server_id)


def upload_scripts(job: ClusterJob) -> Step:
    """The install script on every node: the VNF package's ``script_path`` file, read from
    Tacker as Tacker's drivers take it from the package; our own
    ``install_k8s_cluster.sh`` when the package has no such file (logged, and said in the
    result). On the masters also ``create_admin_token.yaml``, ours, as Tacker's drivers
    upload theirs (they put it on the workers too, where nothing reads it)."""

    async def run(ctx: JobContext) -> InstallScript:
        topo, params = job.topology(ctx), await job.params(ctx)
        path = params.script_path
        found = await optional_package_file(job, ctx, path, "script_path", step=InstallScript.step)
        nodes = tuple(n.name for n in topo.nodes)
        shell = await job.shell(ctx)
        if found.data is None:
            ctx.log.warning(
                "the VNF package has no install script at script_path: running "
                "lccn-subscriber's own install_k8s_cluster.sh",
                extra={"script_path": path, "reason": found.missing},
            )
            script = hosts.node_file(job.settings, hosts.NODE_FILES[0])
            await hosts.upload_scripts(shell, topo.nodes)
            return InstallScript(
                nodes=nodes,
                source="fallback",
                path=path,
                sha256=hashlib.sha256(script).hexdigest(),
                reason=found.missing,
            )
        await hosts.upload_scripts(shell, topo.nodes, found.data)
        return InstallScript(
            nodes=nodes,
            source="package",
            path=path,
            sha256=hashlib.sha256(found.data).hexdigest(),
        )

    return Step(
        InstallScript.step,
        run,
        idempotent=True,
        timeout=300.0,
        needs=(Confirmed, Discovered),
        makes=InstallScript,
    )


class HostsWritten(StepResult):
    hosts: dict[str, str] = {}
    forgotten: tuple[str, ...] = ()


def configure_hosts(job: ClusterJob) -> Step:
    """Hostname and the /etc/hosts block of every node, on every node."""

    async def run(ctx: JobContext) -> HostsWritten:
        found, shell = job.discovered(ctx), await job.shell(ctx)
        topo = found.topology
        forget = [n.name for n in found.departed]
        await asyncio.gather(
            *(
                hosts.write_hosts(shell, n, topo.nodes, forget=forget, step="configure-hosts")
                for n in topo.nodes
            )
        )
        return HostsWritten(hosts={n.name: n.nic_ip for n in topo.nodes}, forgotten=tuple(forget))

    return Step("configure-hosts", run, idempotent=True, timeout=120.0, needs=(Discovered,))


class ProxyApplied(StepResult):
    nodes: dict[str, Any] = {}
    no_proxy_entries: int | None = None


def configure_proxy(job: ClusterJob) -> Step:
    """The parameters' ``proxy`` for apt and containerd on the nodes this operation
    builds (kubeadm gets it in the install script's environment). Convergent: files
    are replaced only when they differ. No URL goes into the result."""

    async def run(ctx: JobContext) -> ProxyApplied:
        params = await job.params(ctx)
        if params.proxy is None or not params.proxy.urls:
            raise SkipStep("no proxy in the parameters", ProxyApplied())
        found, shell = job.discovered(ctx), await job.shell(ctx)
        topo, targets = found.topology, found.touched()
        if not targets:
            raise SkipStep("no new or rebuilt node", ProxyApplied())
        done = await asyncio.gather(
            *(proxy.apply_proxy(shell, topo, n, step="configure-proxy") for n in targets)
        )
        return ProxyApplied(
            nodes={r.node: r.as_json() for r in done},
            no_proxy_entries=len(proxy.no_proxy(params, topo).split(",")),
        )

    return Step("configure-proxy", run, idempotent=True, timeout=120.0, needs=(Discovered,))


class Labelled(StepResult):
    labels: dict[str, dict[str, str]] = {}


def label_workers(job: ClusterJob) -> Step:
    """Workers in an anti-affinity server group get ``CIS-node=<compute host>`` (Tacker's
    v1 pod-affinity feature) and, when the parameters ask (``label_zone``),
    ``topology.kubernetes.io/zone=<availability zone>``, from Nova; values that changed
    (a healed worker on another host) are overwritten."""

    async def run(ctx: JobContext) -> Labelled:
        topo, shell, params = job.topology(ctx), await job.shell(ctx), await job.params(ctx)
        openstack = ctx.services.need_openstack()
        wanted: dict[str, dict[str, str]] = {}
        for worker in topo.workers:
            if not worker.server_id:
                continue
            placement = await openstack.server_placement(worker.server_id)
            want: dict[str, str] = {}
            if placement.anti_affinity and placement.host:
                want[HOST_LABEL] = placement.host
            if params.label_zone and placement.availability_zone:
                want[ZONE_LABEL] = placement.availability_zone
            if want:
                wanted[worker.name] = want
        if not wanted:  # Nova first: no master is asked when there is nothing to label
            raise SkipStep("no worker to label", Labelled())
        via = await kubeadm.anchor(shell, topo)
        if via is None:
            raise TransientStepError("no master of the cluster is ready", step="label-workers")
        for name, want in wanted.items():
            await kubectl.label_node(shell, via, name, want, step="label-workers")
        return Labelled(labels=wanted)

    return Step("label-workers", run, idempotent=True, timeout=120.0, needs=(Discovered,))
