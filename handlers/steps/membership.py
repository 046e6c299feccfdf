"""Day 2: nodes leave the cluster and the cluster, the inventory and Tacker's VNFCs agree.

SCALE and HEAL converge the cluster on what Tacker's VNFCs now are: ``discover``
(``survey_nodes``) compares them with the inventory stored by the last
operation, ``retire-nodes`` forgets what left or was rebuilt, the control-plane
steps join what is new, and ``reconcile-membership`` ends every day-2 job by
making the inventory and the cluster's Node list agree with Tacker. Before
Tacker deletes VMs, the drain hook's job (``drain-request``, ``select-leaving``,
``drain-leaving``) drains the leaving nodes while they still run. Every step
reads the cluster first, so an operation whose events came late, twice or out
of order converges all the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TypeVar

from handlers.job import ClusterJob
from handlers.results import Discovered, DrainServers, Leaving
from handlers.toolkit import etcd, haproxy, kubeadm, kubectl
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import Topology
from subscriber.errors import (
    EndJob,
    PermanentStepError,
    SkipStep,
    SshConnectError,
    TransientStepError,
)
from subscriber.kernel import JobContext, Step, StepResult
from subscriber.kernel.ports import ClusterNode

__all__ = [
    "drain_leaving",
    "drain_request",
    "forget_inventory",
    "forget_node",
    "reconcile_membership",
    "reset_nodes",
    "retire_nodes",
    "select_leaving",
]


class Forgotten(StepResult):
    """What the cluster forgot of leaving nodes: haproxy backends, etcd members."""

    haproxy: tuple[str, ...] = ()
    etcd_members: tuple[str, ...] = ()


class Retired(Forgotten):
    retired: tuple[str, ...] = ()


class Drained(Forgotten):
    drained: tuple[str, ...] = ()


async def forget_node(
    shell: NodeShell,
    topo: Topology,
    via: ClusterNode,
    node: ClusterNode,
    stays: Sequence[ClusterNode],
    *,
    step: str,
) -> Forgotten:
    """The cluster forgets ``node``, through ``via``: a master leaves the haproxy backends
    of the masters that ``stays`` (HA), the Node object goes and, for a master, its etcd
    member (kubeadm never removes one). Each part is a no-op when already done; the
    result says what changed."""
    backends: list[str] = []
    members: list[str] = []
    if node.role == "master" and topo.ha:
        for m in stays:
            if await haproxy.remove_backend(shell, m, node.name, step=step):
                backends.append(f"{m.name}-{node.name}")
    await kubectl.delete_node(shell, via, node.name, step=step)
    if node.role == "master":
        member = await etcd.remove_etcd_member(shell, via, node, step=step)
        if member:
            members.append(member)
    return Forgotten(haproxy=tuple(backends), etcd_members=tuple(members))


F = TypeVar("F", bound=Forgotten)


def _sum(kind: type[F], parts: Sequence[Forgotten], **nodes: tuple[str, ...]) -> F:
    return kind(
        haproxy=tuple(b for p in parts for b in p.haproxy),
        etcd_members=tuple(m for p in parts for m in p.etcd_members),
        **nodes,
    )


def retire_nodes(job: ClusterJob) -> Step:
    """Forget, in the cluster, the nodes whose VM is gone or was rebuilt.

    For each: its API server leaves the other masters' haproxy backends (HA), its
    Node object is deleted and, for a master, its etcd member removed (kubeadm
    never removes one; a rebuilt master could not join beside its old member).
    A rebuilt VM is recognised by its missing install (same name, new VNFC).
    With no surviving master the whole cluster is being rebuilt: nothing to
    retire. A single master rebuilt under surviving workers is refused, as
    Tacker's driver refuses it: the cluster's state went with it.
    """

    async def run(ctx: JobContext) -> Retired:
        found, shell = job.discovered(ctx), await job.shell(ctx)
        topo = found.topology
        replaced = found.changes.replaced if found.changes is not None else ()
        rebuilt = [
            topo.node(name)
            for name in replaced
            if not await kubeadm.is_installed(shell, topo.node(name))
        ]
        gone = [*found.departed, *rebuilt]
        if not gone:
            raise SkipStep("no node left or was rebuilt", Retired())
        names = {n.name for n in gone}
        via = await kubeadm.anchor(shell, topo, exclude=names)
        if via is None:
            survivors = [
                n
                for n in topo.nodes
                if n.name not in names and await kubeadm.is_installed(shell, n)
            ]
            if survivors:
                raise PermanentStepError(
                    "no master survives to keep the cluster (a single master was rebuilt under "
                    f"{', '.join(n.name for n in survivors)}): heal the whole VNF instead",
                    step="retire-nodes",
                )
            raise SkipStep("no node survives: the cluster is rebuilt", Retired())
        masters = [m for m in topo.masters if m.name not in names]
        parts = [
            await forget_node(shell, topo, via, node, masters, step="retire-nodes") for node in gone
        ]
        return _sum(Retired, parts, retired=tuple(n.name for n in gone))

    timeout = job.settings.kubectl_timeout * 6
    return Step("retire-nodes", run, idempotent=True, timeout=timeout, needs=(Discovered,))


class Reconciled(StepResult):
    nodes: tuple[str, ...] = ()
    removed_strays: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()


def reconcile_membership(job: ClusterJob) -> Step:
    """Tacker's VNFCs, the cluster's Nodes and our inventory agree at the end of every day-2 job.

    Node objects no VNFC stands for (a missed SCALE_IN, a node renamed by a
    whole-VNF heal) are deleted, with their etcd member if they were control
    plane; the inventory becomes the discovered nodes.
    """

    async def run(ctx: JobContext) -> Reconciled:
        topo, shell = job.topology(ctx), await job.shell(ctx)
        via = await kubeadm.anchor(shell, topo)
        if via is None:
            raise TransientStepError(
                "no master of the cluster answers", step="reconcile-membership"
            )
        expected = {n.name for n in topo.nodes}
        present = await kubectl.node_names(shell, via, step="reconcile-membership")
        strays = sorted(present - expected)
        for name in strays:
            gone = ClusterNode(name=name, role="worker", vnfc_id="", nic_ip="", ssh_ip="")
            if await kubectl.is_control_plane(shell, via, name) and topo.ha:
                await etcd.remove_etcd_member(shell, via, gone, step="reconcile-membership")
            await kubectl.delete_node(shell, via, name, step="reconcile-membership")
        await ctx.services.need_inventory().replace(ctx.vnf_instance_id, topo.nodes)
        return Reconciled(
            nodes=tuple(sorted(expected)),
            removed_strays=tuple(strays),
            missing=tuple(sorted(expected - present)),
        )

    return Step("reconcile-membership", run, idempotent=True, timeout=120.0, needs=(Discovered,))


class NodesReset(StepResult):
    reset: tuple[str, ...] = ()
    unreachable: tuple[str, ...] = ()


# kubeadm's own undo, and the marker the install script leaves: the VM is as before it.
_RESET = "{kubeadm} reset -f && rm -f /tmp/installed /etc/cni/net.d/*.conflist"


def reset_nodes(job: ClusterJob) -> Step:
    """A rollback: every node of the inventory undoes what the operation's job did to it
    (``kubeadm reset``, the install's marker), so that a later INSTANTIATE on the same
    machines starts clean. A node that does not answer is taken as gone (Tacker deletes
    the VMs next)."""

    async def run(ctx: JobContext) -> NodesReset:
        nodes = await ctx.services.need_inventory().nodes(ctx.vnf_instance_id)
        if not nodes:
            raise SkipStep("no inventory for this instance", NodesReset())
        shell = await job.shell(ctx)
        command = _RESET.format(kubeadm=job.settings.kubeadm)

        async def reset(node: ClusterNode) -> bool:
            try:
                result = await shell.run(node, command)
            except SshConnectError:
                return False
            result.check(step="reset-nodes")
            return True

        done = await asyncio.gather(*(reset(n) for n in nodes))
        return NodesReset(
            reset=tuple(n.name for n, ok in zip(nodes, done, strict=True) if ok),
            unreachable=tuple(n.name for n, ok in zip(nodes, done, strict=True) if not ok),
        )

    return Step("reset-nodes", run, idempotent=True, timeout=job.settings.kubectl_timeout * 3)


class InventoryForgotten(StepResult):
    removed: int = 0


def forget_inventory(job: ClusterJob) -> Step:
    """TERMINATE: the instance's cluster inventory is dropped (its VMs are gone)."""

    async def run(ctx: JobContext) -> InventoryForgotten:
        removed = await ctx.services.need_inventory().forget(ctx.vnf_instance_id)
        if not removed:
            raise SkipStep("no inventory for this instance", InventoryForgotten())
        return InventoryForgotten(removed=removed)

    return Step("forget-inventory", run, idempotent=True, timeout=30.0)


# ------------------------------------------------------------ the drain hook's job


def drain_request(job: ClusterJob) -> Step:
    """The servers of the op-occ's drain request, as its hook (``scale_start``,
    ``heal_start``) left it; with none (a package without the hook, a SCALE_OUT, the
    request not in yet) the job ends."""

    async def run(ctx: JobContext) -> DrainServers:
        request = await job.hook_request(ctx)
        servers = (request or {}).get("servers") or ()
        if not servers:
            raise EndJob("no drain requested for this operation", DrainServers())
        return DrainServers(servers=tuple(sorted(servers)))

    return Step(DrainServers.step, run, idempotent=True, timeout=30.0, makes=DrainServers)


def select_leaving(job: ClusterJob) -> Step:
    """The nodes on the requested servers (by Nova server id, or VNFC id)."""

    async def run(ctx: JobContext) -> Leaving:
        servers = ctx.result(DrainServers).servers
        topo = job.topology(ctx)
        leaving = [n for n in topo.nodes if n.server_id in servers or n.vnfc_id in servers]
        unknown = [s for s in servers if not any(s in (n.server_id, n.vnfc_id) for n in leaving)]
        return Leaving(nodes=tuple(n.name for n in leaving), unknown=tuple(unknown))

    return Step(
        Leaving.step,
        run,
        idempotent=True,
        timeout=30.0,
        needs=(DrainServers, Discovered),
        makes=Leaving,
    )


def drain_leaving(job: ClusterJob) -> Step:
    """Drain, then forget, each selected node while its VM still runs: each is cordoned
    and its pods evicted, a master also leaves the other masters' haproxy backends, its
    Node object is deleted and, for a master, its etcd member removed, through a node
    that stays."""

    async def run(ctx: JobContext) -> Drained:
        names = set(ctx.result(Leaving).nodes)
        if not names:
            raise SkipStep("no node of this cluster is leaving", Drained())
        topo, shell = job.topology(ctx), await job.shell(ctx)
        via = await kubeadm.anchor(shell, topo, exclude=names)
        if via is None:
            raise PermanentStepError(
                "every master is leaving: no node stays to drain through (a single-master "
                "cluster's master cannot be healed: heal the whole VNF instead)",
                step="drain-leaving",
            )
        timeout = job.settings.drain_timeout
        drained: list[str] = []
        parts: list[Forgotten] = []
        stays = [m for m in topo.masters if m.name not in names]
        for node in (n for n in topo.nodes if n.name in names):
            if await kubectl.drain_node(
                shell, via, node.name, timeout=timeout, step="drain-leaving"
            ):
                drained.append(node.name)
            parts.append(await forget_node(shell, topo, via, node, stays, step="drain-leaving"))
        return _sum(Drained, parts, drained=tuple(drained))

    return Step(
        "drain-leaving",
        run,
        idempotent=True,
        timeout=job.settings.drain_timeout * 4 + 120.0,
        needs=(Discovered, Leaving),
    )
