"""Named, checkpointed steps shared by the cluster plans, each wrapping toolkit calls.

Every step is convergent: it reads the cluster first and changes only what
differs, so a replay is a no-op and a resumed job picks up where it stopped.
No step result holds a secret: join tokens, certificate keys and the bearer
token are fetched by the step that needs them and kept in memory only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pydantic import SecretStr

from handlers.job import DISCOVER, ClusterJob
from handlers.toolkit import etcd, haproxy, helm, hosts, kubeadm, kubectl, proxy
from handlers.toolkit.params import params_summary
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import Topology, discover
from subscriber.errors import PermanentStepError, SkipStep, TransientStepError
from subscriber.kernel import JobContext, Step, StepsFor
from subscriber.kernel.ports import ClusterNode, KubernetesAccess

__all__ = [
    "admin_token",
    "cluster_access",
    "configure_hosts",
    "configure_proxy",
    "discover_nodes",
    "init_main_master",
    "install_helm",
    "join_masters",
    "join_workers",
    "label_workers",
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
        forget = [n["name"] for n in _changes(ctx).get("departed", ())]
        await asyncio.gather(
            *(
                hosts.write_hosts(shell, n, topo.nodes, forget=forget, step="configure-hosts")
                for n in topo.nodes
            )
        )
        return {"hosts": {n.name: n.nic_ip for n in topo.nodes}, "forgotten": forget}

    return Step("configure-hosts", run, idempotent=True, timeout=120.0)


def _touched(ctx: JobContext, topo: Topology) -> list[ClusterNode]:
    """The nodes this operation builds: all of them on INSTANTIATE (``discover`` has no
    ``changes``), the added and rebuilt ones on SCALE and HEAL."""
    found = ctx.results.get(DISCOVER) or {}
    if "changes" not in found:
        return list(topo.nodes)
    changes = _changes(ctx)
    names = set(changes.get("added", ())) | set(changes.get("replaced", ()))
    return [n for n in topo.nodes if n.name in names]


def configure_proxy(job: ClusterJob) -> Step:
    """The parameters' ``proxy`` for apt and containerd on the nodes this operation
    builds (kubeadm gets it in the install script's environment). Convergent: files
    are replaced only when they differ. No URL goes into the result."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        params = await job.params(ctx)
        if params.proxy is None or not params.proxy.urls:
            raise SkipStep("no proxy in the parameters", {"nodes": {}})
        topo, shell = job.topology(ctx), await job.shell(ctx)
        targets = _touched(ctx, topo)
        if not targets:
            raise SkipStep("no new or rebuilt node", {"nodes": {}})
        done = await asyncio.gather(
            *(proxy.apply_proxy(shell, topo, n, step="configure-proxy") for n in targets)
        )
        return {
            "nodes": {r.node: r.as_json() for r in done},
            "noProxyEntries": len(proxy.no_proxy(params, topo).split(",")),
        }

    return Step("configure-proxy", run, idempotent=True, timeout=120.0)


def install_helm(job: ClusterJob) -> Step:
    """The user's ``helm_installation_script_path``, read from the VNF package in Tacker,
    run on every master that has not run this very script (its marker on the node).

    Not idempotent: a user's script cut off midway is not run again blindly (the
    job fails and says so); masters that finished are skipped on any later run.
    """

    async def run(ctx: JobContext) -> dict[str, Any]:
        params = await job.params(ctx)
        path = params.helm_installation_script_path
        if not path:
            raise SkipStep("no helm_installation_script_path in the parameters", {"ran": []})
        topo, shell = job.topology(ctx), await job.shell(ctx)
        tacker = ctx.services.need_tacker()
        vnfd_id = (await tacker.get_vnf_instance(ctx.vnf_instance_id)).get("vnfdId")
        if not vnfd_id:
            raise PermanentStepError(
                f"VNF instance {ctx.vnf_instance_id} names no vnfdId: no package to read "
                f"{path} from",
                step="install-helm",
            )
        package = await tacker.vnf_package_content(str(vnfd_id))
        script = helm.read_package_file(package, path, step="install-helm")
        digest = helm.script_digest(script)
        done = await asyncio.gather(*(helm.installed(shell, m, digest) for m in topo.masters))
        before = [m.name for m, ok in zip(topo.masters, done, strict=True) if ok]
        todo = [m for m, ok in zip(topo.masters, done, strict=True) if not ok]
        if not todo:
            raise SkipStep(
                "the Helm script already ran on every master",
                {"ran": [], "already": before, "path": path, "sha256": digest},
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
        return {"ran": [m.name for m in todo], "already": before, "path": path, "sha256": digest}

    return Step("install-helm", run, idempotent=False, timeout=job.settings.helm_timeout + 120.0)


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
        via = await kubeadm.anchor(shell, topo)
        if via is None:
            raise TransientStepError("no master of the cluster is ready", step="join-workers")
        done = await asyncio.gather(*(kubeadm.joined(shell, via, w) for w in workers))
        members = [w.name for w, ok in zip(workers, done, strict=True) if ok]
        todo = [w for w, ok in zip(workers, done, strict=True) if not ok]
        if not todo:
            raise SkipStep("every worker is already a member", {"joined": [], "members": members})
        data = await kubeadm.join_data(shell, via, step="join-workers")
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


def _has_entry(instance: dict[str, Any], endpoint: str, ca: str | None) -> bool:
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


def write_back(job: ClusterJob) -> Step:
    """PATCH our entry into ``vimConnectionInfo`` (skipped when already there)."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        tacker = ctx.services.need_tacker()
        endpoint = job.topology(ctx).endpoint
        instance = await tacker.get_vnf_instance(ctx.vnf_instance_id)
        ca = (ctx.results.get("cluster-access") or {}).get("sslCaCert")
        if _has_entry(instance, endpoint, ca):
            raise SkipStep(f"vimConnectionInfo already has {endpoint}", {"endpoint": endpoint})
        access = await _access(job, ctx, "write-back")
        occ_id = await tacker.write_back(ctx.vnf_instance_id, access, api=job.api)
        return {"endpoint": endpoint, "modifyOpOccId": occ_id}

    return Step("write-back", run, idempotent=True, timeout=300.0)


ZONE_LABEL = "topology.kubernetes.io/zone"
HOST_LABEL = "CIS-node"  # Tacker's pod-affinity label: the worker's compute host


def label_workers(job: ClusterJob) -> Step:
    """Workers in an anti-affinity server group get ``CIS-node=<compute host>`` (Tacker's
    v1 pod-affinity feature) and, when the parameters ask (``label_zone``),
    ``topology.kubernetes.io/zone=<availability zone>``, from Nova; values that changed
    (a healed worker on another host) are overwritten."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        topo, shell, params = job.topology(ctx), await job.shell(ctx), await job.params(ctx)
        openstack = ctx.services.need_openstack()
        via = await kubeadm.anchor(shell, topo)
        if via is None:
            raise TransientStepError("no master of the cluster is ready", step="label-workers")
        labelled: dict[str, dict[str, str]] = {}
        for worker in topo.workers:
            if not worker.server_id:
                continue
            placement = await openstack.server_placement(worker.server_id)
            want: dict[str, str | None] = {}
            if placement.anti_affinity and placement.host:
                want[HOST_LABEL] = placement.host
            if params.label_zone and placement.availability_zone:
                want[ZONE_LABEL] = placement.availability_zone
            if want:
                await kubectl.label_node(shell, via, worker.name, want, step="label-workers")
                labelled[worker.name] = {k: v for k, v in want.items() if v is not None}
        if not labelled:
            raise SkipStep("no worker to label", {"labels": {}})
        return {"labels": labelled}

    return Step("label-workers", run, idempotent=True, timeout=120.0)


# ------------------------------------------------------------------ day 2
#
# SCALE and HEAL converge the cluster on what Tacker's VNFCs now are: the
# ``discover`` step (survey_nodes) compares them with the inventory stored by the
# last operation, and the steps below retire what left or was rebuilt, join
# what is new, and end by making the inventory and the cluster's Node list
# agree with Tacker (reconcile_membership). Every one of them reads the cluster
# first, so an operation whose events came late, twice or out of order
# converges all the same.


def _changes(ctx: JobContext) -> dict[str, Any]:
    found = ctx.results.get(DISCOVER) or {}
    changes: dict[str, Any] = found.get("changes") or {}
    return changes


def survey_nodes(job: ClusterJob) -> Step:
    """The nodes now (Tacker's VNFCs, Heat, Nova) and how they differ from the inventory.

    The inventory is not changed here (``reconcile-membership`` does it last), so
    a rerun of this step after a crash computes the same differences.
    """

    async def run(ctx: JobContext) -> dict[str, Any]:
        tacker = ctx.services.need_tacker()
        instance = await tacker.get_vnf_instance(ctx.vnf_instance_id)
        topo = await discover(instance, await job.params(ctx), ctx.services.need_openstack())
        before = {n.name: n for n in await ctx.services.need_inventory().nodes(ctx.vnf_instance_id)}
        now = {n.name: n for n in topo.nodes}
        return {
            **topo.as_json(),
            "changes": {
                "added": sorted(set(now) - set(before)),
                "replaced": sorted(
                    n for n in now if n in before and before[n].vnfc_id != now[n].vnfc_id
                ),
                "departed": [before[n].as_json() for n in sorted(set(before) - set(now))],
            },
        }

    return Step(DISCOVER, run, idempotent=True, timeout=120.0)


async def forget_node(
    shell: NodeShell,
    topo: Topology,
    via: ClusterNode,
    node: ClusterNode,
    stays: Sequence[ClusterNode],
    done: dict[str, Any],
    *,
    step: str,
) -> None:
    """The cluster forgets ``node``, through ``via``: a master leaves the haproxy backends
    of the masters that ``stays`` (HA), the Node object goes and, for a master, its etcd
    member (kubeadm never removes one). What changed is added to ``done``'s ``haproxy``
    and ``etcdMembers`` lists. Each part is a no-op when already done."""
    if node.role == "master" and topo.ha:
        for m in stays:
            if await haproxy.remove_backend(shell, m, node.name, step=step):
                done["haproxy"].append(f"{m.name}-{node.name}")
    await kubectl.delete_node(shell, via, node.name, step=step)
    if node.role == "master":
        member = await etcd.remove_etcd_member(shell, via, node, step=step)
        if member:
            done["etcdMembers"].append(member)


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

    async def run(ctx: JobContext) -> dict[str, Any]:
        topo, shell, changes = job.topology(ctx), await job.shell(ctx), _changes(ctx)
        departed = [ClusterNode.from_json(n) for n in changes.get("departed", ())]
        rebuilt = [
            topo.node(name)
            for name in changes.get("replaced", ())
            if not await kubeadm.is_installed(shell, topo.node(name))
        ]
        gone = departed + rebuilt
        if not gone:
            raise SkipStep("no node left or was rebuilt", {"retired": []})
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
            raise SkipStep("no node survives: the cluster is rebuilt", {"retired": []})
        masters = [m for m in topo.masters if m.name not in names]
        done: dict[str, Any] = {"retired": [], "etcdMembers": [], "haproxy": []}
        for node in gone:
            await forget_node(shell, topo, via, node, masters, done, step="retire-nodes")
            done["retired"].append(node.name)
        return done

    return Step("retire-nodes", run, idempotent=True, timeout=job.settings.kubectl_timeout * 6)


def converge_masters(job: ClusterJob) -> StepsFor:
    """``join-master-<node>`` per master, in order: skipped when it is a member; else it
    joins the control plane through a surviving master, or, when none survives (a
    whole-VNF heal), the first one inits a new cluster and the others join it."""

    def one(node: ClusterNode) -> Step:
        name = f"join-master-{node.name}"

        async def run(ctx: JobContext) -> dict[str, Any]:
            shell, topo = await job.shell(ctx), job.topology(ctx)
            if await kubeadm.joined(shell, node, node):
                raise SkipStep(f"{node.name} is a member of the cluster", {"node": node.name})
            via = await kubeadm.anchor(shell, topo, exclude={node.name})
            if via is None:
                report = await kubeadm.init_main_master(shell, topo, main=node, step=name)
                return {"node": node.name, "init": True, "server": report.server}
            await kubeadm.join_control_plane(shell, topo, node, via=via, step=name)
            return {"node": node.name, "joined": True, "via": via.name}

        return Step(name, run, idempotent=True, timeout=job.settings.install_timeout + 120.0)

    def expand(found: dict[str, Any]) -> list[Step]:
        return [one(m) for m in Topology.from_json(found).masters]

    return StepsFor("join-master-<node>", DISCOVER, expand)


def haproxy_backends(job: ClusterJob) -> Step:
    """HA: every master's haproxy sends API requests to exactly the cluster's masters."""

    async def run(ctx: JobContext) -> dict[str, Any]:
        topo, shell = job.topology(ctx), await job.shell(ctx)
        if not topo.ha:
            raise SkipStep("one master: no haproxy", {"changed": []})
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
            raise SkipStep("every master's backends are the masters", {"changed": []})
        return {"changed": changed}

    return Step("haproxy-backends", run, idempotent=True, timeout=120.0)


def reconcile_membership(job: ClusterJob) -> Step:
    """Tacker's VNFCs, the cluster's Nodes and our inventory agree at the end of every day-2 job.

    Node objects no VNFC stands for (a missed SCALE_IN, a node renamed by a
    whole-VNF heal) are deleted, with their etcd member if they were control
    plane; the inventory becomes the discovered nodes.
    """

    async def run(ctx: JobContext) -> dict[str, Any]:
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
        return {
            "nodes": sorted(expected),
            "removedStrays": strays,
            "missing": sorted(expected - present),
        }

    return Step("reconcile-membership", run, idempotent=True, timeout=120.0)
