"""The in-memory fakes of the cluster handlers' tests, in one place.

:class:`FakeSsh` is the one SSH executor of the unit tests: scripted answers by
command pattern, a record of what ran, the files written. The in-memory Tacker
and OpenStack (:class:`FakeTacker`, :class:`FakeOpenStack`, :func:`cluster_vnf`
and the SCALE/HEAL changes) live in :mod:`tests.testbed.cluster_vnf`, which the
benchmarks use too; they are imported here so that a test finds every fake in
one module. :func:`cluster_service` runs the cluster handlers in a real Service
against them (on real nodes in the ``ssh`` and ``k8s`` tiers).
"""

from __future__ import annotations

import base64
import logging
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Unpack

import pytest

from handlers import default_routing
from handlers.job import ClusterJob
from handlers.steps import confirm
from handlers.toolkit.topology import Topology, discover
from schemas import Notification, parse_notification_data
from schemas.cluster_params import K8sClusterInstallationParams, parse_cluster_params
from schemas.notifications import VnfLcmOperationOccurrenceNotification
from subscriber.config import ClusterSettings, SshSettings
from subscriber.errors import SkipStep
from subscriber.kernel import JobContext, Plan, PlanItem, Services, Step
from subscriber.kernel.ports import CommandResult, RunOptions, SshExecutor, SshTarget, UploadOptions
from subscriber.kernel.results import result_json
from subscriber.service import Service
from tests.conftest import make_settings
from tests.testbed.cluster_vnf import (
    MASTER_CP,
    STORAGE_CP,
    VIP_CP,
    WORKER_CP,
    FakeOpenStack,
    FakeTacker,
    add_worker,
    cluster_vnf,
    host_params,
    k8s_params,
    lcm_op_occ,
    rebuild_vnfc,
    remove_vnfc,
    server_at,
    uid,
    vnf_package,
    with_storage_server,
)

__all__ = [
    "ACCESS",
    "INSTANTIATE_HEAD",
    "INSTANTIATE_TAIL",
    "JOIN_DATA",
    "MASTER_CP",
    "STORAGE_CP",
    "VIP_CP",
    "WORKER_CP",
    "Call",
    "FakeOpenStack",
    "FakeSsh",
    "FakeTacker",
    "Reply",
    "access_reply",
    "add_worker",
    "assert_only_new_nodes",
    "cluster_service",
    "cluster_vnf",
    "host_params",
    "join_data_reply",
    "k8s_params",
    "lcm_op_occ",
    "rebuild_vnfc",
    "remove_vnfc",
    "server_at",
    "topology",
    "uid",
    "vnf_package",
    "with_services",
    "with_storage_server",
]

# INSTANTIATE's steps before and after its masters' (``init-master-*``, ``join-master-*``).
INSTANTIATE_HEAD = (
    "confirm",
    "load-params",
    "discover",
    "upload-scripts",
    "configure-hosts",
    "configure-proxy",
)
INSTANTIATE_TAIL = (
    "join-workers",
    "configure-registry",
    "label-workers",
    "install-helm",
    "storage-server",
    "nfs-client",
    "register-pvs",
    "admin-token",
    "cluster-access",
    "register-vim",
    "write-back",
)


# The one command of kubectl.read_access (the CA, then the token polled on the node)
# and of kubeadm.join_data (token, CA hash, certificate key), as FakeSsh patterns.
ACCESS = r"pki/ca\.crt.*get secret .*\.data\.token"
JOIN_DATA = r"token create.*openssl x509 -pubkey"


def access_reply(ca: str, token: str) -> str:
    """What :data:`ACCESS`'s command prints: the token line (base64), then the CA file."""
    return f"token:{base64.b64encode(token.encode()).decode()}\n{ca}"


def join_data_reply(token: str, ca_hash: str, key: str = "") -> str:
    """What :data:`JOIN_DATA`'s command prints once every value was made."""
    return f"token:{token}\nca_hash:{ca_hash}\ncertificate_key:{key}\n"


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
        self, target: SshTarget, command: str, **options: Unpack[RunOptions]
    ) -> CommandResult:
        given = options.get("input")
        text = given.decode() if isinstance(given, bytes) else (given or "")
        env, secrets = options.get("env") or {}, tuple(options.get("secrets", ()))
        call = Call(target.host, command, target.username, text, dict(env), secrets)
        self.calls.append(replace(call, sudo=options.get("sudo", False)))
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
        **options: Unpack[UploadOptions],
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


async def topology(data: dict[str, Any]) -> tuple[Topology, K8sClusterInstallationParams]:
    """What discovery finds of one master (10.9.0.2) and two workers with ``data`` as
    additionalParams, and those parameters parsed."""
    tacker, openstack, inst, _ = cluster_vnf(["10.9.0.2"], ["10.9.0.3", "10.9.0.4"], params=data)
    params = parse_cluster_params(data)
    return await discover(tacker.instances[inst], params, openstack), params


async def cluster_service(
    db_url: str,
    tacker: FakeTacker,
    openstack: FakeOpenStack,
    cluster: ClusterSettings,
    *,
    ssh: SshSettings | None = None,
    executor: SshExecutor | None = None,
    update: Mapping[str, Any] | None = None,
    **dispatch: Any,
) -> Service:
    """A started Service whose cluster handlers build on real nodes (over ``ssh``, or
    through ``executor``) and read these Tacker and OpenStack; the caller stops it.

    ``update`` replaces more settings sections (``{"hooks": ...}``), ``dispatch`` sets
    dispatch settings."""
    sections: dict[str, Any] = {"cluster": cluster, **({"ssh": ssh} if ssh else {})}
    svc = Service(
        make_settings(db_url, update={**sections, **(update or {})}, **dispatch),
        routing=default_routing(cluster=cluster, cluster_handlers=True),
        services=Services(tacker=tacker, openstack=openstack, ssh=executor),
    )
    await svc.start()
    return svc


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


def job_context(
    notification: Notification | Mapping[str, Any],
    services: Services,
    *,
    results: dict[str, Any] | None = None,
    source: str = "",
) -> JobContext:
    """The context of a live job's first attempt on ``notification`` (a body is parsed)."""
    if isinstance(notification, Mapping):
        notification = parse_notification_data(notification)
    return JobContext(
        event_id=1,
        job_id=1,
        attempt=1,
        mode="live",
        notification=notification,
        results={} if results is None else results,
        services=services,
        log=logging.LoggerAdapter(logging.getLogger("test"), {}),
        source=source,
    )


def lcm_notification(ctx: JobContext) -> VnfLcmOperationOccurrenceNotification:
    """The job's notification, as the LCM kind every cluster handler is routed."""
    n = ctx.notification
    assert isinstance(n, VnfLcmOperationOccurrenceNotification)
    return n


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
