"""INSTANTIATE: make the VNF's VMs a Kubernetes cluster (Tacker's ``instantiate_end``).

Routes:

* ``INSTANTIATE / STARTING`` -> :class:`ValidateInstantiate`: check the
  parameters at once and fail the job with a clear message for the operator
  (Tacker does not wait for us, so this is where a typo shows first).
* ``INSTANTIATE / COMPLETED`` -> :class:`InstantiateCluster`, whose plan is::

    discover              save the cluster inventory (nodes found while planning)
    upload-scripts        install_k8s_cluster.sh + create_admin_token.yaml on every node
    configure-hosts       hostname and an /etc/hosts block of every node, on every node
    init-master-<name>    kubeadm init on the main master (skipped when it is a member)
    join-master-<name>    per other master, one after another (HA): control-plane join
    join-workers          every worker at once (asyncio.gather), each guarded
    admin-token           the service-account-token Secret for the VIM (v2 approach)
    cluster-access        endpoint (6443 / VIP:16443 / floating IP) and the CA
    register-vim          POST /v1.0/vims when the Tacker client has it enabled
    write-back            PATCH vimConnectionInfo (skipped when already there)

Every step is convergent: it reads the cluster first and changes only what
differs, so a replay is a no-op and a resumed job picks up where it stopped.
Workers join in one step because the runner runs steps one after another; a
step per worker would join them serially. One failing worker fails the step
after the others finished; the retry skips those already joined.

No step result holds a secret: join tokens, certificate keys and the bearer
token are fetched from the cluster by the step that needs them and kept in
memory only.
"""

from __future__ import annotations

import asyncio
import base64
import shlex
import time
from typing import Any

from pydantic import SecretStr

from handlers.base import JobContext, Plan, RetryClass, SkipStep, Step
from handlers.cluster import (
    REMOTE_SCRIPT,
    REMOTE_TOKEN_YAML,
    TOKEN_NAMESPACE,
    TOKEN_SECRET,
    ClusterJob,
    api_version,
    load_params,
    require,
    scripts_dir,
)
from handlers.discovery import discover
from handlers.ports import TACKER, ClusterNode, KubernetesAccess, TackerApi
from schemas.cluster_params import parse_install_output
from subscriber.config import ClusterSettings
from subscriber.errors import LccnError, PermanentStepError, TransientStepError

__all__ = [
    "InstantiateCluster",
    "ValidateInstantiate",
    "build_instantiate_plan",
]

CA_HASH = (
    "openssl x509 -pubkey -noout -in /etc/kubernetes/pki/ca.crt | "
    "openssl pkey -pubin -outform der 2>/dev/null | openssl dgst -sha256 -hex | sed 's/^.* //'"
)
HOSTS_BEGIN = "# lccn-subscriber nodes begin"
HOSTS_END = "# lccn-subscriber nodes end"
# Keeps every line outside our block whose name is not one of ours, then appends the block.
HOSTS_SCRIPT = r"""set -e
[ "$(hostname)" = "$1" ] || hostname "$1"
shift
tmp=$(mktemp)
awk -v names="$*" -v b="$BEGIN" -v e="$END" '
  BEGIN { n = split(names, a, " "); for (i = 1; i <= n; i++) ours[a[i]] = 1 }
  $0 == b { inside = 1; next }
  $0 == e { inside = 0; next }
  inside { next }
  !($2 in ours) { print }
' /etc/hosts > "$tmp"
cat >> "$tmp"
cat "$tmp" > /etc/hosts
rm -f "$tmp"
"""


def _fail(job: ClusterJob, message: str, step: str) -> PermanentStepError:
    return PermanentStepError(
        message, vnf_instance_id=job.ctx.vnf_instance_id, job_id=job.ctx.job_id, step=step
    )


# ------------------------------------------------------------------ cluster reads


async def is_member(job: ClusterJob, node: ClusterNode) -> bool:
    """Whether ``node`` is a node of the cluster (asked on the main master)."""
    result = await job.run(job.topo.main, job.kubectl(f"get node {shlex.quote(node.name)} -o name"))
    return result.ok


async def is_installed(job: ClusterJob, node: ClusterNode) -> bool:
    """Whether the install script finished on ``node`` (it writes /tmp/installed last)."""
    return (await job.run(node, "test -f /tmp/installed")).ok


async def joined(job: ClusterJob, node: ClusterNode) -> bool:
    return await is_member(job, node) and await is_installed(job, node)


async def join_data(job: ClusterJob, step: str) -> tuple[str, str]:
    """A fresh bootstrap token (secret, memory only) and the CA public-key hash."""
    main = job.topo.main
    created = await job.run(main, job.kubeadm("token create"))
    token = created.check(step=step).stdout.strip().splitlines()[-1:]
    ca_hash = (await job.run(main, CA_HASH)).check(step=step).stdout.strip()
    if not token or len(ca_hash) != 64:
        raise _fail(job, "could not read the join token and CA hash on the main master", step)
    return token[0], ca_hash


async def certificate_key(job: ClusterJob, step: str, secrets: list[str]) -> str:
    """Upload the control-plane certificates again and return their key (secret)."""
    result = await job.run(
        job.topo.main,
        job.kubeadm("init phase upload-certs --upload-certs"),
        secrets=secrets,
    )
    lines = result.check(step=step).stdout.strip().splitlines()
    if not lines:
        raise _fail(job, "kubeadm init phase upload-certs printed no certificate key", step)
    return lines[-1].strip()


async def read_bearer_token(job: ClusterJob, step: str) -> str:
    """The VIM's bearer token from its Secret, waiting for the token controller to fill it."""
    deadline = time.monotonic() + job.settings.token_wait_timeout
    command = job.kubectl(
        f"get secret {TOKEN_SECRET} -n {TOKEN_NAMESPACE} -o jsonpath='{{.data.token}}'"
    )
    while True:
        result = await job.run(job.topo.main, command)
        encoded = result.stdout.strip() if result.ok else ""
        if encoded:
            try:
                return base64.b64decode(encoded, validate=True).decode()
            except ValueError:
                raise _fail(job, f"Secret {TOKEN_SECRET} holds no valid token", step) from None
        if time.monotonic() >= deadline:
            raise TransientStepError(
                f"Secret {TOKEN_SECRET} has no token after {job.settings.token_wait_timeout:g}s",
                vnf_instance_id=job.ctx.vnf_instance_id,
                step=step,
            )
        await asyncio.sleep(1.0)  # polling the API server: no event to wait on over SSH


def _install(job: ClusterJob, *args: str) -> str:
    return "bash " + " ".join(shlex.quote(a) for a in (REMOTE_SCRIPT, *args))


# ----------------------------------------------------------------------- steps


def _discover(job: ClusterJob) -> Step:
    async def run(ctx: JobContext) -> dict[str, Any]:
        await job.inventory.replace(ctx.vnf_instance_id, job.topo.nodes)
        return job.topo.as_json()

    return Step("discover", run, idempotent=True, timeout=60.0)


def _upload_scripts(job: ClusterJob) -> Step:
    source = scripts_dir(job.settings)

    async def run(ctx: JobContext) -> dict[str, Any]:
        async def one(node: ClusterNode) -> None:
            target = job.target(node)
            await job.ssh.upload(
                target, source / "install_k8s_cluster.sh", REMOTE_SCRIPT, mode=0o755
            )
            await job.ssh.upload(target, source / "create_admin_token.yaml", REMOTE_TOKEN_YAML)

        await asyncio.gather(*(one(n) for n in job.topo.nodes))
        return {"nodes": [n.name for n in job.topo.nodes]}

    return Step("upload-scripts", run, idempotent=True, timeout=300.0)


def _configure_hosts(job: ClusterJob) -> Step:
    async def run(ctx: JobContext) -> dict[str, Any]:
        nodes = job.topo.nodes
        block = "".join(
            [HOSTS_BEGIN + "\n", *(f"{n.nic_ip} {n.name}\n" for n in nodes), HOSTS_END + "\n"]
        )
        names = " ".join(shlex.quote(n.name) for n in nodes)

        async def one(node: ClusterNode) -> None:
            command = f"bash -c {shlex.quote(HOSTS_SCRIPT)} hosts {shlex.quote(node.name)} {names}"
            result = await job.run(
                node, command, input=block, env={"BEGIN": HOSTS_BEGIN, "END": HOSTS_END}
            )
            result.check(step="configure-hosts")

        await asyncio.gather(*(one(n) for n in nodes))
        return {"hosts": {n.name: n.nic_ip for n in nodes}}

    return Step("configure-hosts", run, idempotent=True, timeout=120.0)


def _init_main_master(job: ClusterJob) -> Step:
    main = job.topo.main
    name = f"init-master-{main.name}"

    async def run(ctx: JobContext) -> dict[str, Any]:
        if await joined(job, main):
            raise SkipStep(f"{main.name} is already a member of the cluster", {"node": main.name})
        topo, p = job.topo, job.params
        command = _install(
            job,
            "-m",
            ",".join(m.nic_ip for m in topo.masters),
            "-i",
            topo.cluster_ip,
            "-p",
            p.pod_cidr,
            "-a",
            p.service_cidr,
        )
        result = await job.run(
            main, command, timeout=job.settings.install_timeout, env=job.script_env(main)
        )
        result.check(step=name)
        try:
            report = parse_install_output(result.stdout)
        except ValueError as exc:
            raise _fail(job, str(exc), name) from None
        return {
            "node": main.name,
            "server": report.server,
            "sslCaCertHash": report.ssl_ca_cert_hash,
        }

    return Step(name, run, idempotent=True, timeout=job.settings.install_timeout + 60.0)


def _join_master(job: ClusterJob, node: ClusterNode) -> Step:
    name = f"join-master-{node.name}"

    async def run(ctx: JobContext) -> dict[str, Any]:
        if await joined(job, node):
            raise SkipStep(f"{node.name} is already a member of the cluster", {"node": node.name})
        token, ca_hash = await join_data(job, name)
        key = await certificate_key(job, name, [token])
        topo = job.topo
        command = _install(
            job,
            "-m",
            ",".join(m.nic_ip for m in topo.masters),
            "-i",
            topo.cluster_ip,
            "-p",
            job.params.pod_cidr,
            "-a",
            job.params.service_cidr,
            "-t",
            token,
            "-s",
            ca_hash,
            "-k",
            key,
        )
        result = await job.run(
            node,
            command,
            timeout=job.settings.install_timeout,
            env=job.script_env(node),
            secrets=[token, key],
        )
        result.check(step=name)
        return {"node": node.name, "joined": True}

    return Step(name, run, idempotent=True, timeout=job.settings.install_timeout + 120.0)


def _join_workers(job: ClusterJob) -> Step:
    async def run(ctx: JobContext) -> dict[str, Any]:
        workers = job.topo.workers
        if not workers:
            raise SkipStep("no worker VNFCs", {"joined": [], "members": []})
        done = await asyncio.gather(*(joined(job, w) for w in workers))
        members = [w.name for w, ok in zip(workers, done, strict=True) if ok]
        todo = [w for w, ok in zip(workers, done, strict=True) if not ok]
        if not todo:
            raise SkipStep("every worker is already a member", {"joined": [], "members": members})
        token, ca_hash = await join_data(job, "join-workers")
        topo = job.topo
        join_ip = topo.cluster_ip if topo.ha else topo.main.nic_ip

        async def one(worker: ClusterNode) -> None:
            command = _install(job, "-w", worker.nic_ip, "-i", join_ip, "-t", token, "-s", ca_hash)
            result = await job.run(
                worker,
                command,
                timeout=job.settings.install_timeout,
                env=job.script_env(worker),
                secrets=[token],
            )
            if not result.ok and await is_member(job, worker):
                # A join cut off earlier (crash, kill) can still finish on the
                # node and register it under our feet; this one then fails.
                # Converge instead of failing for good: the retry sees it joined.
                raise TransientStepError(
                    f"{worker.name} was registered by an earlier join that was cut off; "
                    "checking again",
                    step="join-workers",
                )
            result.check(step="join-workers")

        outcomes = await asyncio.gather(*(one(w) for w in todo), return_exceptions=True)
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


def _admin_token(job: ClusterJob) -> Step:
    async def run(ctx: JobContext) -> dict[str, Any]:
        main = job.topo.main
        exists = await job.run(
            main, job.kubectl(f"get secret {TOKEN_SECRET} -n {TOKEN_NAMESPACE} -o name")
        )
        if exists.ok:
            raise SkipStep(f"Secret {TOKEN_SECRET} exists", {"secret": TOKEN_SECRET})
        binding = await job.run(
            main,
            job.kubectl(
                "create clusterrolebinding lccn-k8svim-admin --clusterrole cluster-admin "
                f"--serviceaccount {TOKEN_NAMESPACE}:default"
            ),
        )
        if not binding.ok and "AlreadyExists" not in binding.stderr:
            binding.check(step="admin-token")
        created = await job.run(main, job.kubectl(f"create -f {REMOTE_TOKEN_YAML}"))
        if not created.ok and "AlreadyExists" not in created.stderr:
            created.check(step="admin-token")
        return {"secret": TOKEN_SECRET}

    return Step("admin-token", run, idempotent=True, timeout=120.0)


def _cluster_access(job: ClusterJob) -> Step:
    async def run(ctx: JobContext) -> dict[str, Any]:
        ca = await job.run(job.topo.main, "cat /etc/kubernetes/pki/ca.crt")
        pem = ca.check(step="cluster-access").stdout
        if "BEGIN CERTIFICATE" not in pem:
            raise _fail(
                job, "the main master's /etc/kubernetes/pki/ca.crt is no PEM", "cluster-access"
            )
        await read_bearer_token(job, "cluster-access")  # ready before anyone is told
        return {"endpoint": job.topo.endpoint, "sslCaCert": pem}

    return Step(
        "cluster-access", run, idempotent=True, timeout=job.settings.token_wait_timeout + 60
    )


async def _access(job: ClusterJob, ctx: JobContext, step: str) -> KubernetesAccess:
    known = ctx.results.get("cluster-access") or {}
    vim = ctx.results.get("register-vim") or {}
    token = await read_bearer_token(job, step)
    return KubernetesAccess(
        endpoint=str(known.get("endpoint") or job.topo.endpoint),
        ssl_ca_cert=str(known.get("sslCaCert") or ""),
        bearer_token=SecretStr(token),
        vim_id=vim.get("vimId"),
    )


def _register_vim(job: ClusterJob) -> Step:
    async def run(ctx: JobContext) -> dict[str, Any]:
        name = job.vim_name()
        vim_id = await job.tacker.register_vim(name, await _access(job, ctx, "register-vim"))
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


def _write_back(job: ClusterJob) -> Step:
    async def run(ctx: JobContext) -> dict[str, Any]:
        endpoint = job.topo.endpoint
        instance = await job.tacker.get_vnf_instance(ctx.vnf_instance_id)
        if _has_entry(instance, endpoint):
            raise SkipStep(f"vimConnectionInfo already has {endpoint}", {"endpoint": endpoint})
        access = await _access(job, ctx, "write-back")
        occ_id = await job.tacker.write_back(ctx.vnf_instance_id, access, api=job.api)
        return {"endpoint": endpoint, "modifyOpOccId": occ_id}

    return Step("write-back", run, idempotent=True, timeout=300.0)


def build_instantiate_plan(job: ClusterJob) -> Plan:
    """The INSTANTIATE plan for a discovered topology (pure: no I/O)."""
    topo = job.topo
    steps = [
        _discover(job),
        _upload_scripts(job),
        _configure_hosts(job),
        _init_main_master(job),
        *(_join_master(job, m) for m in topo.masters[1:]),
        _join_workers(job),
        _admin_token(job),
        _cluster_access(job),
        _register_vim(job),
        _write_back(job),
    ]
    return Plan(tuple(steps))


async def prepare(ctx: JobContext, settings: ClusterSettings) -> ClusterJob:
    """Parameters and (for handlers that need nodes) nothing else yet: no I/O but Tacker."""
    tacker: TackerApi = require(ctx, TACKER)
    api = api_version(ctx)
    params = await load_params(ctx, tacker, api)
    return ClusterJob(ctx=ctx, settings=settings, api=api, params=params)


class InstantiateCluster:
    """``INSTANTIATE / COMPLETED``: discover the nodes, then plan the cluster build."""

    name = "cluster-instantiate"

    def __init__(self, settings: ClusterSettings | None = None) -> None:
        self.settings = settings or ClusterSettings()

    async def plan(self, ctx: JobContext) -> Plan:
        job = await prepare(ctx, self.settings)
        instance = await job.tacker.get_vnf_instance(ctx.vnf_instance_id)
        if instance.get("instantiationState") not in (None, "INSTANTIATED"):
            raise PermanentStepError(
                f"VNF instance {ctx.vnf_instance_id} is {instance.get('instantiationState')}, "
                "not INSTANTIATED",
                vnf_instance_id=ctx.vnf_instance_id,
                job_id=ctx.job_id,
            )
        job.topology = await discover(instance, job.params, job.openstack)
        return build_instantiate_plan(job)


class ValidateInstantiate:
    """``INSTANTIATE / STARTING``: validate the parameters before Tacker builds the VMs."""

    name = "cluster-instantiate-validate"

    def __init__(self, settings: ClusterSettings | None = None) -> None:
        self.settings = settings or ClusterSettings()

    async def plan(self, ctx: JobContext) -> Plan:
        async def validate(ctx: JobContext) -> dict[str, Any]:
            try:
                job = await prepare(ctx, self.settings)
            except LccnError as exc:
                if exc.retriable:
                    raise
                ctx.log.error("invalid cluster parameters", extra={"error": exc.message})
                raise
            p = job.params
            return {
                "api": job.api,
                "masterVdu": p.master_node.vdu_id,
                "workerVdu": p.worker_node.vdu_id,
                "podCidr": p.pod_cidr,
                "serviceCidr": p.service_cidr,
            }

        return Plan(
            (
                Step(
                    "validate-params",
                    validate,
                    idempotent=True,
                    timeout=60.0,
                    retry=RetryClass.AUTO,
                ),
            )
        )
