"""In-memory SSH, Tacker and OpenStack for the cluster handlers' tests (the ports' seams).

:class:`FakeSsh` is the one SSH executor of the unit tests: scripted answers by
command pattern, a record of what ran, the files written. :class:`FakeTacker`
serves a VNF instance and its op-occs the way Tacker v2 shows them and records
every write; :class:`FakeOpenStack` answers Heat port and Nova host lookups for
that instance. :func:`cluster_vnf` builds both for a cluster whose VNFC "VMs"
are given addresses (the SSH test hosts' in the ``ssh`` tier).
"""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import pytest

from handlers.job import ClusterJob
from handlers.steps import confirm
from subscriber.config import ClusterSettings
from subscriber.errors import OpenStackNotFound, SkipStep, TackerRejected
from subscriber.kernel import JobContext, Plan, PlanItem, Services, Step
from subscriber.kernel.ports import (
    CommandResult,
    KubernetesAccess,
    PortAddresses,
    ServerPlacement,
    SshTarget,
)
from subscriber.kernel.results import result_json

MASTER_CP = "masterNode_CP1"
WORKER_CP = "workerNode_CP2"
VIP_CP = "vip_CP"


LIST_EXCLUDED = frozenset(
    {"operationParams", "error", "resourceChanges", "changedInfo", "changedExtConnectivity"}
)


def uid() -> str:
    return str(uuid.uuid4())


# ----------------------------------------------------------------- SSH


@dataclass(frozen=True)
class Reply:
    """A scripted command's answer (its host, command and secrets are the call's)."""

    stdout: str = ""
    exit_status: int = 0
    stderr: str = ""


@dataclass(frozen=True)
class Call:
    """One command (or ``upload PATH``) as :class:`FakeSsh` received it."""

    host: str
    command: str
    user: str = "root"
    input: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    sudo: bool = False


AnswerValue = str | Reply | CommandResult | BaseException
Answer = AnswerValue | Callable[[Call], AnswerValue | None]


@dataclass
class _Rule:
    pattern: re.Pattern[str]
    answer: Answer
    host: str | None


class FakeSsh:
    """An in-memory :class:`~subscriber.kernel.ports.SshExecutor`.

    Scripting, the latest matching rule first:

    * ``on(pattern, answer, host=None)``: a command in which the regular expression
      ``pattern`` is found (``re.search``, ``.`` matches newlines), on ``host`` if
      given, gets ``answer``: a ``str`` (stdout, exit 0), a :class:`Reply`, a ready
      ``CommandResult``, an exception (raised), or a callable taking the :class:`Call`
      and returning one of those (``None``: the next rule decides).
    * ``fail(pattern, exit_status=1, stderr="", host=None)``: ``on`` with a failure.

    Built in, as on a node: ``NodeShell.write_file`` stores its stdin in
    ``files[(host, path)]`` (bytes) and its mode in ``modes`` and answers
    ``changed``/``unchanged``; ``upload`` stores the bytes in ``files`` (with
    ``uploads=False`` an upload fails the test). Any other command answers nothing,
    exit 0.

    Observing: ``calls`` (every command and upload, in order), ``ran(pattern)``
    (the calls matching), ``text(host, path)`` (a written file as text).
    """

    def __init__(self, *, uploads: bool = True) -> None:
        self.calls: list[Call] = []
        self.files: dict[tuple[str, str], bytes] = {}
        self.modes: dict[tuple[str, str], str] = {}
        self._rules: list[_Rule] = []
        self._uploads = uploads

    def on(self, pattern: str, answer: Answer, *, host: str | None = None) -> FakeSsh:
        """Answer commands matching ``pattern`` (on ``host`` only, if given) with ``answer``."""
        self._rules.append(_Rule(re.compile(pattern, re.DOTALL), answer, host))
        return self

    def fail(
        self, pattern: str, exit_status: int = 1, stderr: str = "", *, host: str | None = None
    ) -> FakeSsh:
        """Let commands matching ``pattern`` exit with ``exit_status`` and ``stderr``."""
        return self.on(pattern, Reply(exit_status=exit_status, stderr=stderr), host=host)

    def ran(self, pattern: str) -> list[Call]:
        """The calls whose command matches ``pattern`` (``re.search``), in order."""
        found = re.compile(pattern, re.DOTALL)
        return [c for c in self.calls if found.search(c.command)]

    def text(self, host: str, path: str) -> str:
        return self.files[(host, path)].decode()

    async def run(
        self,
        target: SshTarget,
        command: str,
        *,
        command_timeout: float | None = None,
        sudo: bool = False,
        input: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
        secrets: Sequence[str] = (),
    ) -> CommandResult:
        text = input.decode() if isinstance(input, bytes) else (input or "")
        call = Call(target.host, command, target.username, text, dict(env or {}), tuple(secrets))
        self.calls.append(replace(call, sudo=sudo))
        answer = self._scripted(call)
        if answer is None:
            answer = self._write(call) or Reply()
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, CommandResult):
            return answer
        reply = Reply(stdout=answer) if isinstance(answer, str) else answer
        return CommandResult(
            host=target.host,
            command=command,
            exit_status=reply.exit_status,
            stdout=reply.stdout,
            stderr=reply.stderr,
            duration=0.0,
            secrets=call.secrets,
        )

    async def upload(
        self,
        target: SshTarget,
        source: bytes | str | Path,
        remote_path: str,
        *,
        mode: int = 0o644,
        upload_timeout: float | None = None,
    ) -> None:
        assert self._uploads, f"no upload expected, got {remote_path}"
        self.calls.append(Call(target.host, f"upload {remote_path}", target.username))
        data = source if isinstance(source, bytes) else Path(source).read_bytes()
        self.files[(target.host, remote_path)] = data

    def _scripted(self, call: Call) -> AnswerValue | None:
        for rule in reversed(self._rules):
            if rule.host not in (None, call.host) or not rule.pattern.search(call.command):
                continue
            answer = rule.answer(call) if callable(rule.answer) else rule.answer
            if answer is not None:
                return answer
        return None

    def _write(self, call: Call) -> str | None:
        """``NodeShell.write_file``'s command: ``bash -c SCRIPT write PATH MODE``, stdin."""
        argv = shlex.split(call.command) if call.command.startswith("bash -c ") else []
        if len(argv) != 6 or argv[3] != "write" or "cmp -s" not in argv[2]:
            return None
        key, data = (call.host, argv[4]), call.input.encode()
        same = self.files.get(key) == data and self.modes.get(key) == argv[5]
        self.files[key], self.modes[key] = data, argv[5]
        return "unchanged" if same else "changed"


@dataclass
class FakeTacker:
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    op_occs: dict[str, dict[str, Any]] = field(default_factory=dict)
    register_vims: bool = False
    write_backs: list[tuple[str, KubernetesAccess, str]] = field(default_factory=list)
    cleared: list[tuple[str, str]] = field(default_factory=list)
    vims: dict[str, str] = field(default_factory=dict)
    deleted_vims: list[str] = field(default_factory=list)
    gets: int = 0
    packages: dict[str, bytes] = field(default_factory=dict)  # vnfdId -> package zip

    async def get_vnf_instance(self, vnf_instance_id: str) -> dict[str, Any]:
        self.gets += 1
        if vnf_instance_id not in self.instances:
            raise TackerRejected(f"GET vnf_instances/{vnf_instance_id}: 404", status=404)
        return self.instances[vnf_instance_id]

    async def get_op_occ(self, op_occ_id: str) -> dict[str, Any]:
        self.gets += 1
        if op_occ_id not in self.op_occs:
            raise TackerRejected(f"GET vnf_lcm_op_occs/{op_occ_id}: 404", status=404)
        return self.op_occs[op_occ_id]

    async def list_op_occs(self, filter: str | None = None) -> list[dict[str, Any]]:
        """Only the filter the handlers use: ``(eq,vnfInstanceId,X);(eq,operation,Y)``.

        As Tacker (SOL013 ``exclude_default``), a list leaves out ``operationParams``,
        ``error``, ``resourceChanges``, ``changedInfo`` and ``changedExtConnectivity``.
        """
        self.gets += 1
        wanted = dict(part.strip("()").split(",")[1:] for part in (filter or "").split(";") if part)
        return [
            {k: v for k, v in o.items() if k not in LIST_EXCLUDED}
            for o in self.op_occs.values()
            if all(o.get(k) == v for k, v in wanted.items())
        ]

    async def write_back(
        self, vnf_instance_id: str, access: KubernetesAccess, *, api: str = "v2"
    ) -> str:
        self.write_backs.append((vnf_instance_id, access, api))
        entry = {
            "vimId": access.vim_id or uid(),
            "vimType": "ETSINFV.KUBERNETES.V_1",
            "interfaceInfo": {"endpoint": access.endpoint},
        }
        self.instances[vnf_instance_id].setdefault("vimConnectionInfo", {})["lccn-k8s"] = entry
        return uid()

    async def clear_write_back(self, vnf_instance_id: str, *, api: str = "v1") -> None:
        self.cleared.append((vnf_instance_id, api))

    async def register_vim(
        self, name: str, access: KubernetesAccess, *, owner: str | None = None
    ) -> str | None:
        if not self.register_vims:
            return None
        return self.vims.setdefault(name, uid())

    async def vnf_package(self, vnfd_id: str, into: IO[bytes]) -> None:
        self.gets += 1
        if vnfd_id not in self.packages:
            raise TackerRejected(f"Tacker has no onboarded VNF package with vnfdId {vnfd_id}")
        into.write(self.packages[vnfd_id])

    async def delete_vim(self, name: str, *, owner: str | None = None) -> bool:
        if name not in self.vims:
            return False
        del self.vims[name]
        self.deleted_vims.append(name)
        return True


@dataclass
class FakeOpenStack:
    ports: dict[tuple[str, str], PortAddresses] = field(default_factory=dict)
    hosts: dict[str, str] = field(default_factory=dict)
    zones: dict[str, str] = field(default_factory=dict)
    anti_affinity: set[str] = field(default_factory=set)  # server ids in such a group
    volumes: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)

    async def port_addresses(self, stack_id: str, cp_name: str) -> PortAddresses:
        self.calls.append((stack_id, cp_name))
        try:
            return self.ports[(stack_id, cp_name)]
        except KeyError:
            raise OpenStackNotFound(f"Heat resource {cp_name} of stack {stack_id}: 404") from None

    async def server_host(self, server_id: str) -> str | None:
        self.calls.append(("server", server_id))
        return self.hosts.get(server_id)

    async def server_placement(self, server_id: str) -> ServerPlacement:
        self.calls.append(("placement", server_id))
        return ServerPlacement(
            host=self.hosts.get(server_id),
            availability_zone=self.zones.get(server_id, "nova"),
            anti_affinity=server_id in self.anti_affinity,
        )

    async def volume_devices(self, stack_id: str, volume_name: str) -> tuple[str, ...]:
        self.calls.append((stack_id, volume_name))
        try:
            return self.volumes[(stack_id, volume_name)]
        except KeyError:
            what = f"Heat resource {volume_name} of stack {stack_id}"
            raise OpenStackNotFound(f"{what}: 404") from None


def k8s_params(
    *,
    master_user: str = "root",
    worker_user: str = "root",
    key: str | None = None,
    password: str | None = None,
    ha: bool = False,
    cluster_fip_name: str | None = None,
) -> dict[str, Any]:
    """additionalParams in the v2 guide's shape (plus our key field)."""

    def login(user: str) -> dict[str, Any]:
        out: dict[str, Any] = {"username": user}
        if password is not None and user != "root":
            out["password"] = password
        else:
            out["ssh_private_key_path"] = key or "/nonexistent/key"
        return out

    master: dict[str, Any] = {
        "vdu_id": "masterNode",
        "ssh_cp_name": MASTER_CP,
        "nic_cp_name": MASTER_CP,
        "cluster_cp_name": VIP_CP if ha else MASTER_CP,
        "pod_cidr": "10.200.0.0/16",
        "cluster_cidr": "10.199.187.0/24",
        **login(master_user),
    }
    if cluster_fip_name:
        master["cluster_fip_name"] = cluster_fip_name
    return {
        "k8s_cluster_installation_param": {
            "script_path": "Scripts/install_k8s_cluster.sh",
            "master_node": master,
            "worker_node": {
                "vdu_id": "workerNode",
                "ssh_cp_name": WORKER_CP,
                "nic_cp_name": WORKER_CP,
                **login(worker_user),
            },
        }
    }


def cluster_vnf(
    masters: list[str],
    workers: list[str],
    *,
    vip: str | None = None,
    params: dict[str, Any] | None = None,
    floating: dict[str, str] | None = None,
    instance_id: str | None = None,
) -> tuple[FakeTacker, FakeOpenStack, str, str]:
    """A v2 instance with those VNFC addresses; returns (tacker, openstack, instance, op-occ)."""
    instance_id = instance_id or uid()
    occ_id = uid()
    top = uid()
    tacker, openstack = FakeTacker(), FakeOpenStack()
    vnfcs: list[dict[str, Any]] = []
    for index, (vdu, cp, ip) in enumerate(
        [("masterNode", MASTER_CP, ip) for ip in masters]
        + [("workerNode", WORKER_CP, ip) for ip in workers]
    ):
        stack = f"vnf-{instance_id}-{vdu}-{index}/{uid()}"
        server = uid()
        vnfcs.append(
            {
                "id": uid(),
                "vduId": vdu,
                "computeResource": {
                    "resourceId": server,
                    "vimLevelResourceType": "OS::Nova::Server",
                },
                "vnfcCpInfo": [{"id": uid(), "cpdId": cp}],
                "metadata": {"stack_id": stack},
            }
        )
        openstack.ports[(stack, cp)] = PortAddresses((ip,), (floating or {}).get(ip))
        openstack.hosts[server] = f"compute-{index % 3}"
    if len(masters) == 1:
        # cluster_cp_name = the master's own CP in the simple flavour
        pass
    else:
        assert vip is not None
        openstack.ports[(f"vnf-{instance_id}/{top}", VIP_CP)] = PortAddresses((vip,))
    tacker.instances[instance_id] = {
        "id": instance_id,
        "instantiationState": "INSTANTIATED",
        "instantiatedVnfInfo": {
            "flavourId": "complex" if len(masters) > 1 else "simple",
            "vnfcResourceInfo": vnfcs,
            "metadata": {"stack_id": top},
        },
        "vimConnectionInfo": {},
    }
    tacker.op_occs[occ_id] = {
        "id": occ_id,
        "operation": "INSTANTIATE",
        "operationState": "COMPLETED",
        "vnfInstanceId": instance_id,
        "operationParams": {"additionalParams": params or k8s_params(ha=len(masters) > 1)},
    }
    return tacker, openstack, instance_id, occ_id


def with_services(plan: Plan, services: Services) -> Plan:
    """``plan`` with every step (expanded ones too) seeing ``services`` over the job's own.

    How a handler module loaded into ``serve`` swaps the real Tacker and
    OpenStack for these fakes while SSH, the store and the runner stay real.
    """

    def wrap(step: Step) -> Step:
        async def run(ctx: JobContext) -> Any:
            return await step.run(replace(ctx, services=ctx.services.merged(services)))

        return replace(step, run=run)

    def wrap_item(item: PlanItem) -> PlanItem:
        if isinstance(item, Step):
            return wrap(item)
        return replace(item, expand=lambda found, f=item.expand: [wrap(s) for s in f(found)])

    return Plan(tuple(wrap_item(i) for i in plan.items))


def _vnfcs(tacker: FakeTacker, instance_id: str) -> list[dict[str, Any]]:
    vnfcs: list[dict[str, Any]] = tacker.instances[instance_id]["instantiatedVnfInfo"][
        "vnfcResourceInfo"
    ]
    return vnfcs


def _vnfc_at(
    tacker: FakeTacker, openstack: FakeOpenStack, instance_id: str, ip: str
) -> dict[str, Any]:
    for vnfc in _vnfcs(tacker, instance_id):
        cp = vnfc["vnfcCpInfo"][0]["cpdId"]
        if ip in openstack.ports[(vnfc["metadata"]["stack_id"], cp)].fixed_ips:
            return vnfc
    raise KeyError(ip)


def server_at(tacker: FakeTacker, openstack: FakeOpenStack, instance_id: str, ip: str) -> str:
    """The Nova server id of the VNFC at ``ip`` (what Tacker's grant names to remove)."""
    return str(_vnfc_at(tacker, openstack, instance_id, ip)["computeResource"]["resourceId"])


def add_worker(tacker: FakeTacker, openstack: FakeOpenStack, instance_id: str, ip: str) -> str:
    """SCALE_OUT as Tacker shows it: a new worker VNFC (its own stack and server), first."""
    stack, server, vnfc_id = f"vnf-{instance_id}-workerNode-{uid()}/{uid()}", uid(), uid()
    _vnfcs(tacker, instance_id).insert(
        0,
        {
            "id": vnfc_id,
            "vduId": "workerNode",
            "computeResource": {"resourceId": server, "vimLevelResourceType": "OS::Nova::Server"},
            "vnfcCpInfo": [{"id": uid(), "cpdId": WORKER_CP}],
            "metadata": {"stack_id": stack},
        },
    )
    openstack.ports[(stack, WORKER_CP)] = PortAddresses((ip,))
    openstack.hosts[server] = "compute-9"
    return vnfc_id


def remove_vnfc(tacker: FakeTacker, openstack: FakeOpenStack, instance_id: str, ip: str) -> str:
    """SCALE_IN as Tacker shows it: the VNFC at ``ip`` and its stack are gone."""
    vnfc = _vnfc_at(tacker, openstack, instance_id, ip)
    _vnfcs(tacker, instance_id).remove(vnfc)
    del openstack.ports[(vnfc["metadata"]["stack_id"], vnfc["vnfcCpInfo"][0]["cpdId"])]
    return str(vnfc["id"])


def rebuild_vnfc(tacker: FakeTacker, openstack: FakeOpenStack, instance_id: str, ip: str) -> str:
    """HEAL of one VNFC as Tacker shows it: a new server (new VNFC id), same stack and port."""
    vnfc = _vnfc_at(tacker, openstack, instance_id, ip)
    server = uid()
    vnfc["id"] = uid()
    vnfc["computeResource"] = {**vnfc["computeResource"], "resourceId": server}
    openstack.hosts[server] = "compute-8"
    return str(vnfc["id"])


def lcm_op_occ(
    tacker: FakeTacker, instance_id: str, operation: str, params: dict[str, Any] | None = None
) -> str:
    """A COMPLETED op-occ of ``operation``; without ``params`` its request repeats none
    (Tacker's bed sends scale and heal requests so)."""
    occ_id = uid()
    tacker.op_occs[occ_id] = {
        "id": occ_id,
        "operation": operation,
        "operationState": "COMPLETED",
        "vnfInstanceId": instance_id,
        "operationParams": {"additionalParams": params} if params else {},
    }
    return occ_id


async def run_step(step: Step, ctx: JobContext) -> Any:
    """Run ``step`` as the runner does: it reads only the results it declares, and its
    result comes back as stored (JSON); skips and failures raise as they are."""
    return result_json(await step.run(ctx.for_step(step)))


async def confirmed(ctx: JobContext) -> Any:
    """Run the plan's first step, ``confirm``, against the fake Tacker (what package reads
    need: the instance's vnfdId), keeping its result as the runner would."""
    step = confirm(ClusterJob(ClusterSettings(), ctx.notification))
    ctx.results[step.name] = await run_step(step, ctx)
    return ctx.results[step.name]


async def assert_only_new_nodes(step: Step, ctx: JobContext, added: str) -> None:
    """On SCALE/HEAL ``step`` touches only the added and rebuilt nodes (``added`` here,
    already written, so nothing changes on it), and skips when there are none."""
    ctx.results["discover"] = {
        **ctx.results["discover"],
        "changes": {"added": [added], "replaced": [], "departed": []},
    }
    result = await run_step(step, ctx)
    assert list(result["nodes"]) == [added]
    assert result["nodes"][added]["changed"] == []  # written before: nothing new
    ctx.results["discover"]["changes"] = {"added": [], "replaced": [], "departed": []}
    with pytest.raises(SkipStep, match="no new or rebuilt node"):
        await run_step(step, ctx)
