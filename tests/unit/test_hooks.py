"""The management-driver hooks end to end over loopback HTTP: the endpoint, its answer
from a checkpointed job in any order of arrival and across a restart, and the package's
hook script run as Tacker runs it (a subprocess with a pickled dict on stdin).

The jobs here are recorders on the hooks' routes: the drain keeps the real first step
(``drain-request``, reading what the endpoint stored), the INSTANTIATE job hands an
entry back as the real ``write-back`` does in a hook's job; the cluster steps
themselves run in ``tests/ssh`` and, with the real Tacker, in ``tests/e2e``.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
from pydantic import SecretStr

from handlers.job import ClusterJob
from handlers.results import DrainServers, Leaving
from handlers.steps import drain_request
from schemas import Notification
from schemas.hooks import answer_key
from schemas.openapi import OPENAPI_PATH
from subscriber.config import ClusterSettings, HookSettings, HttpSettings
from subscriber.errors import PermanentStepError, TransientStepError
from subscriber.kernel import JobContext, Plan, RoutingTable, Step, StepResult
from subscriber.kernel.ports import KubernetesAccess
from subscriber.service import Service
from tests import REPO
from tests.conftest import ServiceFactory, callback_url, free_port, wait_settled
from tests.factories import op_occ, uid

pytestmark = pytest.mark.asyncio

TOKEN = "hook-token-5f2c9a71e3"
BEARER = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LWJlYXJlci10b2tlbg.c2lnbmF0dXJlLWJ5dGVz"
HOOK = REPO / "scripts/vnf_package/kubernetes_cluster/Scripts/lccn_hook.py"


class RecordingDrain:
    """The drain handler's plan with its cluster steps replaced by a recorder."""

    name = "recording-drain"  # found by its route, not by this name

    def __init__(self) -> None:
        self.drained: list[list[str]] = []
        self.delay = 0.0
        self.fail = False

    def plan(self, notification: Notification) -> Plan:
        job = ClusterJob(ClusterSettings(), notification)

        async def select(ctx: JobContext) -> Leaving:
            await asyncio.sleep(self.delay)
            if self.fail:
                raise PermanentStepError("kubectl drain timed out on worker12", step=Leaving.step)
            servers = list(ctx.result(DrainServers).servers)
            self.drained.append(servers)
            return Leaving(nodes=tuple(f"node-{s}" for s in servers))

        selecting = Step(Leaving.step, select, needs=(DrainServers,), makes=Leaving)
        return Plan((drain_request(job), selecting))


class Built(StepResult):
    workers: int = 0


class RecordingBuild:
    """The INSTANTIATE job: reads the instance its hook saw, "joins" its workers (one
    step run per try), then hands its entry back as ``write-back`` does for a hook."""

    name = "recording-build"

    def __init__(self) -> None:
        self.joined: list[str] = []  # op-occs whose join step ran
        self.handed: list[str] = []
        self.fail_joins = 0
        self.delay = 0.0

    def plan(self, notification: Notification) -> Plan:
        job = ClusterJob(ClusterSettings(), notification)

        async def join(ctx: JobContext) -> Built:
            instance = await job.instance(ctx)
            await asyncio.sleep(self.delay)
            self.joined.append(ctx.notification.vnfLcmOpOccId)
            if self.fail_joins:
                self.fail_joins -= 1
                raise PermanentStepError(
                    "worker35: kubeadm join exit 1: [preflight] port 10250 is in use",
                    step="join-workers",
                )
            vnfcs = instance["instantiatedVnfInfo"]["vnfcResourceInfo"]
            return Built(workers=len(vnfcs))

        async def hand(ctx: JobContext) -> Built:
            access = KubernetesAccess(
                endpoint="https://10.9.0.2:6443", ssl_ca_cert="PEM", bearer_token=SecretStr(BEARER)
            )
            if ctx.source == "hook":
                await ctx.services.need_answers().hand_back(
                    ctx.notification.vnfLcmOpOccId, ctx.vnf_instance_id, access
                )
            self.handed.append(ctx.notification.vnfLcmOpOccId)
            return Built()

        return Plan((Step("join-workers", join), Step("write-back", hand)))


def registry(drain: RecordingDrain, build: RecordingBuild | None = None) -> RoutingTable:
    reg = RoutingTable()
    for operation in ("SCALE", "HEAL"):
        reg.register(drain, operation=operation, state="PROCESSING")
    reg.register(build or RecordingBuild(), operation="INSTANTIATE", state="COMPLETED")
    return reg


Start = Callable[..., Awaitable[Service]]


@pytest.fixture
def start(start_service: ServiceFactory) -> Start:
    """A Service with the hooks on (``token``), on ``port`` if given (a restart)."""

    async def run(
        handler: RecordingDrain,
        build: RecordingBuild | None = None,
        token: str = TOKEN,
        port: int | None = None,
        **dispatch: Any,
    ) -> Service:
        update: dict[str, Any] = {"hooks": HookSettings(token=token)}
        if port is not None:
            update["http"] = HttpSettings(host="127.0.0.1", port=port)
        svc: Service = await start_service(registry(handler, build), update=update, **dispatch)
        return svc

    return run


def hook_url(svc: Service) -> str:
    return f"http://127.0.0.1:{svc.port}{svc.settings.hooks.path}"


VNFCS = [{"id": f"vnfc-{s}", "computeResource": {"resourceId": s}} for s in ("s1", "s2", "s3")]


def vnf_instance(instance: str, **extra: Any) -> dict[str, Any]:
    """The instance as Tacker hands it to the script inside the operation."""
    return {
        "id": instance,
        "vnfdId": "vnfd-1",
        "instantiationState": "INSTANTIATED",
        "instantiatedVnfInfo": {"flavourId": "simple", "vnfcResourceInfo": VNFCS},
        **extra,
    }


def request(
    instance: str, occ: str, servers: list[str], point: str = "scale_start"
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "point": point,
        "vnfInstanceId": instance,
        "vnfLcmOpOccId": occ,
        "vnfInstance": vnf_instance(instance),
    }
    if servers:
        body["servers"] = servers
    return body


AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def post(http: aiohttp.ClientSession, svc: Service, body: Any, **kw: Any) -> Any:
    headers = kw.pop("headers", AUTH)
    async with http.post(hook_url(svc), json=body, headers=headers, **kw) as r:
        return r.status, await r.json()


async def answer(
    http: aiohttp.ClientSession,
    svc: Service,
    occ: str,
    until: str = "done",
    point: str = "scale_start",
) -> Any:
    async with asyncio.timeout(20):
        while True:
            async with http.get(f"{hook_url(svc)}/{occ}/{point}", headers=AUTH) as r:
                data = await r.json()
                if r.status == 200 and data["status"] in (until, "failed", "done"):
                    return data
            await asyncio.sleep(0.05)


async def notify(
    http: aiohttp.ClientSession, svc: Service, inst: str, occ: str, state: str, **kw: Any
) -> None:
    """Tacker's notification of the op-occ's ``state`` (SCALE unless ``operation``)."""
    body = op_occ(instance=inst, op_occ_id=occ, state=state, **{"operation": "SCALE", **kw})
    async with http.post(callback_url(svc), json=body) as r:
        assert r.status == 204


async def test_the_hook_is_off_without_a_token(start: Start, http: aiohttp.ClientSession) -> None:
    svc = await start(RecordingDrain(), token="")
    status, problem = await post(http, svc, request(uid(), uid(), ["s1"]))
    assert status == 404 and problem["status"] == 404


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}]
)
async def test_requests_need_the_bearer_token(
    start: Start, http: aiohttp.ClientSession, headers: dict[str, str]
) -> None:
    handler = RecordingDrain()
    svc = await start(handler)
    occ = uid()
    async with http.post(hook_url(svc), json=request(uid(), occ, ["s1"]), headers=headers) as r:
        assert r.status == 401
        assert r.content_type == "application/problem+json"
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
        assert TOKEN not in await r.text()
    async with http.get(f"{hook_url(svc)}/{occ}/scale_start", headers=headers) as r:
        assert r.status == 401
    assert await svc.store.events.list() == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**request("i", "", ["s1"])}, "vnfLcmOpOccId"),
        ({**request("i", "o/../x", ["s1"])}, "vnfLcmOpOccId"),
        ({**request("", "o", ["s1"])}, "vnfInstanceId"),
        ({**request("i", "o", [])}, None),  # a drain names its servers
        ({**request("i", "o", ["s1"], point="instantiate_end")}, None),  # ... only a drain
        ({**request("i", "o", [], point="heal_end"), "vnfInstance": None}, None),
        ({**request("i", "o", [""])}, "servers.0"),
        ({**request("i", "o", ["s1"]), "point": "instantiate_start"}, "point"),
        ({**request("i", "o", ["s1"]), "vnfInstance": [1]}, "vnfInstance"),
        ({"vnfInstanceId": "i", "vnfLcmOpOccId": "o", "servers": ["s1"]}, "point"),
        ([1, 2], None),
    ],
)
async def test_bad_requests_get_problem_details_and_store_nothing(
    start: Start, http: aiohttp.ClientSession, body: Any, field: str | None
) -> None:
    svc = await start(RecordingDrain())
    status, problem = await post(http, svc, body)
    assert status == 400, problem
    assert problem.get("field") == field
    assert await svc.store.events.list() == []
    async with http.post(
        hook_url(svc), data=b"x", headers={**AUTH, "Content-Type": "text/plain"}
    ) as r:
        assert r.status == 415


async def test_request_before_tacker_processing_drains_once(
    start: Start, http: aiohttp.ClientSession
) -> None:
    handler = RecordingDrain()
    svc = await start(handler)
    inst, occ = uid(), uid()
    status, first = await post(http, svc, request(inst, occ, ["srv-b", "srv-a"]))
    assert status == 202 and first["status"] in ("pending", "running", "done")
    done = await answer(http, svc, occ)
    assert done["status"] == "done" and done["nodes"] == ["node-srv-a", "node-srv-b"]
    # Tacker's own PROCESSING comes late: the same transition, stored once.
    await notify(http, svc, inst, occ, "PROCESSING")
    events = await wait_settled(svc, 1)
    assert [(e.source, e.status) for e in events] == [("hook", "done")]
    assert handler.drained == [["srv-a", "srv-b"]]
    # Asked again (the script retried its POST): the answer stands, nothing runs again.
    status, again = await post(http, svc, request(inst, occ, ["srv-a"]))
    assert status == 202 and again["status"] == "done"
    assert handler.drained == [["srv-a", "srv-b"]]


async def test_a_hook_made_event_starts_the_trace_its_job_continues(
    start: Start, http: aiohttp.ClientSession, spans: Any
) -> None:
    """The drain hook comes before Tacker's PROCESSING: the event it makes is where the
    trace begins, as a callback's ingest is."""
    svc = await start(RecordingDrain())
    inst, occ = uid(), uid()
    status, _ = await post(http, svc, request(inst, occ, ["srv-a"]))
    assert status == 202 and (await answer(http, svc, occ))["status"] == "done"
    (event,) = await wait_settled(svc, 1)
    assert event.source == "hook" and event.trace_id is not None
    finished = spans.get_finished_spans()
    (ingest,) = [s for s in finished if s.name == "ingest"]
    assert ingest.attributes["lccn.source"] == "hook"
    assert f"{ingest.context.trace_id:032x}" == event.trace_id
    jobs = [s for s in finished if s.name == "job"]
    assert jobs and all(j.parent and j.parent.span_id == ingest.context.span_id for j in jobs)


async def test_request_after_tacker_processing_ran_runs_the_job_again(
    start: Start, http: aiohttp.ClientSession
) -> None:
    handler = RecordingDrain()
    svc = await start(handler)
    inst, occ = uid(), uid()
    await notify(http, svc, inst, occ, "PROCESSING")
    (event,) = await wait_settled(svc, 1)
    assert event.status == "done" and handler.drained == []  # nothing was requested yet
    status, _ = await post(http, svc, request(inst, occ, ["srv-1"]))
    assert status == 202
    done = await answer(http, svc, occ)
    assert done["status"] == "done" and done["eventId"] == event.id
    assert handler.drained == [["srv-1"]]
    assert len(await svc.store.jobs.for_event(event.id)) == 2
    # A second request of the op-occ adds its servers; the job runs once more for them.
    await post(http, svc, request(inst, occ, ["srv-2"]))
    done = await answer(http, svc, occ)
    assert done["nodes"] == ["node-srv-1", "node-srv-2"]
    assert handler.drained[-1] == ["srv-1", "srv-2"]


async def test_the_answer_survives_a_restart(start: Start, http: aiohttp.ClientSession) -> None:
    handler = RecordingDrain()
    handler.delay = 5.0
    svc = await start(handler, graceful_timeout=0.1)
    inst, occ = uid(), uid()
    await post(http, svc, request(inst, occ, ["srv-1"]))
    async with asyncio.timeout(10):
        while (await svc.store.events.list())[0].status != "running":
            await asyncio.sleep(0.02)
    await svc.stop()  # the step is cut off mid-run (grace 0.1 s)
    assert handler.drained == []
    handler.delay = 0.0
    svc2 = await start(handler, port=svc.port)
    done = await answer(http, svc2, occ)
    assert done["status"] == "done" and handler.drained == [["srv-1"]]


async def test_a_failed_drain_is_answered_failed(start: Start, http: aiohttp.ClientSession) -> None:
    handler = RecordingDrain()
    handler.fail = True
    svc = await start(handler)
    occ = uid()
    await post(http, svc, request(uid(), occ, ["srv-1"]))
    failed = await answer(http, svc, occ, until="failed")
    assert failed["status"] == "failed" and "kubectl drain timed out" in failed["detail"]
    async with http.get(f"{hook_url(svc)}/{uid()}/scale_start", headers=AUTH) as r:
        assert r.status == 404
    async with http.get(f"{hook_url(svc)}/{occ}/scale_start_x", headers=AUTH) as r:
        assert r.status == 400


# -- the points after Tacker's work: instantiate_end --------------------------------


async def instantiate_end(http: aiohttp.ClientSession, svc: Service, inst: str, occ: str) -> Any:
    return await post(http, svc, request(inst, occ, [], point="instantiate_end"))


async def test_instantiate_end_runs_the_completed_job_once_and_hands_the_entry_back(
    start: Start, http: aiohttp.ClientSession
) -> None:
    build = RecordingBuild()
    svc = await start(RecordingDrain(), build)
    inst, occ = uid(), uid()
    status, first = await instantiate_end(http, svc, inst, occ)
    assert status == 202 and first["point"] == "instantiate_end"
    done = await answer(http, svc, occ, point="instantiate_end")
    assert done["status"] == "done", done
    entry = done["vimConnectionInfo"]["k8s"]
    assert entry["vimType"] == "ETSINFV.KUBERNETES.V_1"
    assert entry["accessInfo"]["bearer_token"] == BEARER
    assert entry["interfaceInfo"] == {"endpoint": "https://10.9.0.2:6443", "ssl_ca_cert": "PEM"}
    # The job read the instance the hook saw (Tacker's database has none yet).
    (event,) = await svc.store.events.list()
    assert (event.source, event.operation_state) == ("hook", "COMPLETED")
    steps = await svc.store.jobs.steps((await svc.store.jobs.current(event.id)).id)  # type: ignore[union-attr]
    assert steps[0].result_json() == {"workers": 3}
    # The token is in the store only sealed; neither in the event nor in the request.
    kept = await svc.store.tacker.get_value(answer_key(occ))
    assert kept is not None and BEARER not in kept and "bearer_token" not in kept
    assert BEARER not in event.body
    # Tacker's COMPLETED, sent once the script returned: the same transition.
    await notify(http, svc, inst, occ, "COMPLETED", operation="INSTANTIATE")
    events = await wait_settled(svc, 1)
    assert [(e.source, e.status) for e in events] == [("hook", "done")]
    # The script asks again (it did not get the answer): the same answer, no second run.
    status, again = await instantiate_end(http, svc, inst, occ)
    assert status == 202 and again["status"] == "done" and again["vimConnectionInfo"]
    assert build.joined == [occ] and build.handed == [occ]


async def test_a_failed_job_is_answered_with_its_reason_and_a_retry_resumes_it(
    start: Start, http: aiohttp.ClientSession
) -> None:
    build = RecordingBuild()
    build.fail_joins = 1
    svc = await start(RecordingDrain(), build)
    inst, occ = uid(), uid()
    await instantiate_end(http, svc, inst, occ)
    failed = await answer(http, svc, occ, until="failed", point="instantiate_end")
    assert failed["status"] == "failed"
    assert failed["detail"] == (
        "join-workers: worker35: kubeadm join exit 1: [preflight] port 10250 is in use"
    )
    assert "vimConnectionInfo" not in failed
    # Tacker's retry runs the script again: the job resumes (its done steps stay done).
    status, _ = await instantiate_end(http, svc, inst, occ)
    assert status == 202
    done = await answer(http, svc, occ, point="instantiate_end")
    assert done["status"] == "done" and done["vimConnectionInfo"]
    assert build.joined == [occ, occ] and build.handed == [occ]
    (event,) = await svc.store.events.list()
    jobs = await svc.store.jobs.for_event(event.id)
    assert [j.mode for j in jobs] == ["live", "resume"]


async def test_a_retried_step_is_answered_running_with_its_reason(
    start: Start, http: aiohttp.ClientSession
) -> None:
    class Flaky(RecordingBuild):
        def plan(self, notification: Notification) -> Plan:
            async def join(ctx: JobContext) -> Built:
                raise TransientStepError("worker35 does not answer on port 22", step="join")

            return Plan((Step("join-workers", join),))

    svc = await start(RecordingDrain(), Flaky(), backoff_initial=30.0)
    inst, occ = uid(), uid()
    await instantiate_end(http, svc, inst, occ)
    async with asyncio.timeout(10):
        while True:
            async with http.get(f"{hook_url(svc)}/{occ}/instantiate_end", headers=AUTH) as r:
                data = await r.json()
            if data.get("detail"):
                break
            await asyncio.sleep(0.05)
    assert data["status"] == "running"
    assert data["detail"] == "join-workers: worker35 does not answer on port 22"


async def test_the_end_answer_survives_a_restart_and_nothing_runs_twice(
    start: Start, http: aiohttp.ClientSession
) -> None:
    build = RecordingBuild()
    build.delay = 5.0
    svc = await start(RecordingDrain(), build, graceful_timeout=0.1)
    inst, occ = uid(), uid()
    await instantiate_end(http, svc, inst, occ)
    async with asyncio.timeout(10):
        while (await svc.store.events.list())[0].status != "running":
            await asyncio.sleep(0.02)
    await svc.stop()  # the step is cut off mid-run (grace 0.1 s)
    build.delay = 0.0
    svc2 = await start(RecordingDrain(), build, port=svc.port)
    done = await answer(http, svc2, occ, point="instantiate_end")
    assert done["status"] == "done" and done["vimConnectionInfo"]
    assert build.handed == [occ]


async def test_a_sealed_answer_opens_only_with_its_token_and_op_occ(
    start: Start, http: aiohttp.ClientSession
) -> None:
    svc = await start(RecordingDrain())
    inst, occ = uid(), uid()
    await instantiate_end(http, svc, inst, occ)
    await answer(http, svc, occ, point="instantiate_end")
    assert svc.answers is not None
    sealed = await svc.store.tacker.get_value(answer_key(occ))
    assert sealed is not None
    other = uid()
    await svc.store.tacker.set_value(answer_key(other), sealed)  # moved to another op-occ
    assert await svc.answers.read(other) is None
    assert await svc.store.tacker.get_value(answer_key(other)) is None  # dropped


# -- the package's hook script, run as Tacker's conductor runs it ---------------------


def script_input(
    inst: str,
    occ: str,
    removed: list[str],
    *,
    operation: str = "scale_start",
    kind: str = "SCALE_IN",
) -> bytes:
    openstack = {
        "vimId": "vim-1",
        "vimType": "ETSINFV.OPENSTACK_KEYSTONE.V_3",
        "interfaceInfo": {"endpoint": "http://keystone:5000/v3"},
        "accessInfo": {"username": "nfv", "password": "the-vim-password-7d1"},
    }
    return pickle.dumps(
        {
            "operation": operation,
            "request": {"type": kind, "aspectId": "worker_instance", "numberOfSteps": 1},
            "vnf_instance": vnf_instance(
                inst, vimConnectionInfo={"vim1": openstack}, metadata={"x": 1}
            ),
            "grant_request": {
                "vnfInstanceId": inst,
                "vnfLcmOpOccId": occ,
                "removeResources": [
                    {"id": uid(), "type": "COMPUTE", "resource": {"resourceId": s}} for s in removed
                ]
                + [{"id": uid(), "type": "LINKPORT"}],
            },
            "grant_response": None,
            "tmp_csar_dir": "/tmp/x",
            "user_script_err_handling_data": {},
        }
    )


async def run_hook(data: bytes, env: dict[str, str]) -> tuple[int, bytes, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LCCN_HOOK")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HOOK),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**clean, "LCCN_HOOK_CONFIG": "/nonexistent", **env},
    )
    out, err = await asyncio.wait_for(proc.communicate(data), 60)
    return proc.returncode or 0, out, err.decode()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


def hook_env(svc: Service, token_file: Path, **more: str) -> dict[str, str]:
    return {"LCCN_HOOK_URL": hook_url(svc), "LCCN_HOOK_TOKEN_FILE": str(token_file), **more}


async def test_hook_script_waits_for_the_drain(start: Start, token_file: Path) -> None:
    handler = RecordingDrain()
    handler.delay = 1.0
    svc = await start(handler)
    inst, occ = uid(), uid()
    rc, out, err = await run_hook(script_input(inst, occ, ["s3"]), hook_env(svc, token_file))
    assert (rc, out, err) == (0, b"", "")  # nothing to return to Tacker
    assert handler.drained == [["s3"]]  # done before the script returned
    (event,) = await svc.store.events.list()
    assert (event.source, event.operation, event.operation_state) == ("hook", "SCALE", "PROCESSING")


async def test_hook_script_returns_the_instance_with_our_entry_after_its_own(
    start: Start, token_file: Path
) -> None:
    svc = await start(RecordingDrain())
    inst, occ = uid(), uid()
    data = script_input(inst, occ, [], operation="instantiate_end")
    rc, out, err = await run_hook(data, hook_env(svc, token_file))
    assert rc == 0, err
    returned = pickle.loads(out)
    given = pickle.loads(data)["vnf_instance"]
    instance = returned["vnf_instance"]
    # Tacker's instance as it was (its VIM's password too: Tacker stores what it gets) ...
    assert {k: v for k, v in instance.items() if k != "vimConnectionInfo"} == {
        k: v for k, v in given.items() if k != "vimConnectionInfo"
    }
    # ... with our entry after its own (Tacker's later operations use the first one).
    assert list(instance["vimConnectionInfo"]) == ["vim1", "k8s"]
    assert instance["vimConnectionInfo"]["vim1"] == given["vimConnectionInfo"]["vim1"]
    assert instance["vimConnectionInfo"]["k8s"]["accessInfo"] == {"bearer_token": BEARER}
    # What the script sent us carried no credential of Tacker's.
    raw = await svc.store.tacker.get_value(f"hook:{occ}:COMPLETED")
    assert raw is not None and "the-vim-password-7d1" not in raw and "accessInfo" not in raw


async def test_hook_script_fails_with_one_line_tacker_puts_in_the_op_occ(
    start: Start, token_file: Path
) -> None:
    build = RecordingBuild()
    build.fail_joins = 1
    svc = await start(RecordingDrain(), build)
    data = script_input(uid(), uid(), [], operation="instantiate_end")
    rc, out, err = await run_hook(data, hook_env(svc, token_file))
    assert (rc, out) == (1, b"")
    assert err == (
        "lccn-subscriber: join-workers: worker35: kubeadm join exit 1: "
        "[preflight] port 10250 is in use"
    )


async def test_hook_script_with_a_config_file(
    start: Start, token_file: Path, tmp_path: Path
) -> None:
    handler = RecordingDrain()
    svc = await start(handler)
    conf = tmp_path / "lccn_hook.json"
    conf.write_text(json.dumps({"url": hook_url(svc), "token_file": str(token_file)}))
    inst, occ = uid(), uid()
    data = script_input(inst, occ, ["s1"], operation="heal_start", kind="")
    rc, _, err = await run_hook(data, {"LCCN_HOOK_CONFIG": str(conf)})
    assert rc == 0, err
    assert handler.drained == [["s1"]]
    (event,) = await svc.store.events.list()
    assert event.operation == "HEAL"


@pytest.mark.parametrize(
    ("operation", "kind", "removed"),
    [
        ("scale_start", "SCALE_OUT", []),
        ("heal_start", "", ["s1", "s2", "s3"]),  # the whole VNF: nothing stays to drain through
        ("instantiate_start", "", []),
        ("modify_information_end", "", []),
    ],
)
async def test_hook_script_has_nothing_to_do(
    start: Start, token_file: Path, operation: str, kind: str, removed: list[str]
) -> None:
    svc = await start(RecordingDrain())
    data = script_input(uid(), uid(), removed, operation=operation, kind=kind)
    rc, out, err = await run_hook(data, hook_env(svc, token_file))
    assert (rc, out, err) == (0, b"", "")
    assert await svc.store.events.list() == []


async def test_hook_script_unconfigured_warns_and_lets_tacker_go_on() -> None:
    for point in ("scale_start", "instantiate_end"):
        rc, out, err = await run_hook(script_input(uid(), uid(), ["s1"], operation=point), {})
        assert (rc, out) == (0, b"")
        assert err.count("\n") == 1 and "not configured" in err


async def test_hook_script_fails_clearly(start: Start, token_file: Path, tmp_path: Path) -> None:
    svc = await start(RecordingDrain())
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token-123")
    data = script_input(uid(), uid(), ["s1"])
    rc, out, err = await run_hook(
        data, {"LCCN_HOOK_URL": hook_url(svc), "LCCN_HOOK_TOKEN_FILE": str(wrong)}
    )
    assert (rc, out) == (1, b"")
    assert "\n" not in err and "refused the hook's token" in err
    assert "not-the-token-123" not in err
    # Nobody answers: bounded by its timeout, then a clear failure.
    rc, _, err = await run_hook(
        data,
        {
            "LCCN_HOOK_URL": f"http://127.0.0.1:{free_port()}/lccn/hooks",
            "LCCN_HOOK_TOKEN_FILE": str(token_file),
            "LCCN_HOOK_TIMEOUT": "1",
        },
    )
    assert rc == 1 and "no answer within 1 s" in err, err


async def test_the_openapi_document_describes_the_hooks(
    start: Start, http: aiohttp.ClientSession
) -> None:
    svc = await start(RecordingDrain())
    async with http.get(f"http://127.0.0.1:{svc.port}{OPENAPI_PATH}") as r:
        doc = await r.json()
    path = svc.settings.hooks.path
    assert set(doc["paths"][path]) == {"post"}
    assert set(doc["paths"][path + "/{vnfLcmOpOccId}/{point}"]) == {"get"}
    schema = {**doc["components"]["schemas"]["HookRequest"], "$defs": {}}
    jsonschema.validate(request("i", "o", ["s1"]), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**request("i", "o", ["s1"]), "point": "nope"}, schema)
    off = await start(RecordingDrain(), token="")
    async with http.get(f"http://127.0.0.1:{off.port}{OPENAPI_PATH}") as r:
        assert path not in (await r.json())["paths"]
