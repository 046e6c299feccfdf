"""The drain hook end to end over loopback HTTP: the endpoint, its answer from a
checkpointed job in any order of arrival and across a restart, and the package's hook
script run as Tacker runs it (a subprocess with a pickled dict on stdin).

The drain job here keeps the real first step (``drain-request``, reading what the
endpoint stored) and replaces the cluster steps with one that records the servers it
was asked to drain; the cluster steps themselves run in ``tests/ssh/test_drain.py``.
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

from handlers.job import ClusterJob
from handlers.results import DrainServers, Leaving
from handlers.steps import drain_request
from schemas import Notification
from schemas.openapi import OPENAPI_PATH
from subscriber.config import ClusterSettings, HookSettings, HttpSettings
from subscriber.errors import PermanentStepError
from subscriber.kernel import JobContext, Plan, RoutingTable, Step
from subscriber.service import Service
from tests import REPO
from tests.conftest import ServiceFactory, callback_url, free_port, wait_settled
from tests.factories import op_occ, uid

pytestmark = pytest.mark.asyncio

TOKEN = "hook-token-5f2c9a71e3"
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


def registry(handler: RecordingDrain) -> RoutingTable:
    reg = RoutingTable()
    for operation in ("SCALE", "HEAL"):
        reg.register(handler, operation=operation, state="PROCESSING")
    return reg


Start = Callable[..., Awaitable[Service]]


@pytest.fixture
def start(start_service: ServiceFactory) -> Start:
    """A Service with the drain hook on (``token``), on ``port`` if given (a restart)."""

    async def run(
        handler: RecordingDrain, token: str = TOKEN, port: int | None = None, **dispatch: Any
    ) -> Service:
        update: dict[str, Any] = {"hooks": HookSettings(token=token)}
        if port is not None:
            update["http"] = HttpSettings(host="127.0.0.1", port=port)
        svc: Service = await start_service(registry(handler), update=update, **dispatch)
        return svc

    return run


def hook_url(svc: Service) -> str:
    return f"http://127.0.0.1:{svc.port}{svc.settings.hooks.path}"


def request(
    instance: str, occ: str, servers: list[str], operation: str = "SCALE"
) -> dict[str, Any]:
    return {
        "vnfInstanceId": instance,
        "vnfLcmOpOccId": occ,
        "operation": operation,
        "servers": servers,
    }


AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def post(http: aiohttp.ClientSession, svc: Service, body: Any, **kw: Any) -> Any:
    headers = kw.pop("headers", AUTH)
    async with http.post(hook_url(svc), json=body, headers=headers, **kw) as r:
        return r.status, await r.json()


async def answer(http: aiohttp.ClientSession, svc: Service, occ: str, until: str = "done") -> Any:
    async with asyncio.timeout(20):
        while True:
            async with http.get(f"{hook_url(svc)}/{occ}", headers=AUTH) as r:
                data = await r.json()
                if r.status == 200 and data["status"] in (until, "failed", "done"):
                    return data
            await asyncio.sleep(0.05)


async def tacker_processing(http: aiohttp.ClientSession, svc: Service, inst: str, occ: str) -> None:
    body = op_occ(instance=inst, op_occ_id=occ, operation="SCALE", state="PROCESSING")
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
    async with http.get(f"{hook_url(svc)}/{occ}", headers=headers) as r:
        assert r.status == 401
    assert await svc.store.events.list() == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**request("i", "", ["s1"])}, "vnfLcmOpOccId"),
        ({**request("", "o", ["s1"])}, "vnfInstanceId"),
        ({**request("i", "o", [])}, "servers"),
        ({**request("i", "o", [""])}, "servers.0"),
        ({**request("i", "o", ["s1"], operation="INSTANTIATE")}, "operation"),
        ({"vnfInstanceId": "i", "vnfLcmOpOccId": "o", "operation": "SCALE"}, "servers"),
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
    await tacker_processing(http, svc, inst, occ)
    events = await wait_settled(svc, 1)
    assert [(e.source, e.status) for e in events] == [("hook", "done")]
    assert handler.drained == [["srv-a", "srv-b"]]
    # Asked again (the script retried its POST): the answer stands, nothing runs again.
    status, again = await post(http, svc, request(inst, occ, ["srv-a"]))
    assert status == 202 and again["status"] == "done"
    assert handler.drained == [["srv-a", "srv-b"]]


async def test_request_after_tacker_processing_ran_runs_the_job_again(
    start: Start, http: aiohttp.ClientSession
) -> None:
    handler = RecordingDrain()
    svc = await start(handler)
    inst, occ = uid(), uid()
    await tacker_processing(http, svc, inst, occ)
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
    async with http.get(f"{hook_url(svc)}/{uid()}", headers=AUTH) as r:
        assert r.status == 404


# -- the package's hook script, run as Tacker's conductor runs it ---------------------


def script_input(
    inst: str,
    occ: str,
    removed: list[str],
    *,
    operation: str = "scale_start",
    kind: str = "SCALE_IN",
) -> bytes:
    vnfcs = [{"id": f"vnfc-{s}", "computeResource": {"resourceId": s}} for s in ("s1", "s2", "s3")]
    return pickle.dumps(
        {
            "operation": operation,
            "request": {"type": kind, "aspectId": "worker_instance", "numberOfSteps": 1},
            "vnf_instance": {"id": inst, "instantiatedVnfInfo": {"vnfcResourceInfo": vnfcs}},
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


async def run_hook(data: bytes, env: dict[str, str]) -> tuple[int, str, str]:
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
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


async def test_hook_script_waits_for_the_drain(start: Start, token_file: Path) -> None:
    handler = RecordingDrain()
    handler.delay = 1.0
    svc = await start(handler)
    inst, occ = uid(), uid()
    rc, out, err = await run_hook(
        script_input(inst, occ, ["s3"]),
        {"LCCN_HOOK_URL": hook_url(svc), "LCCN_HOOK_TOKEN_FILE": str(token_file)},
    )
    assert (rc, out) == (0, ""), err  # stdout stays empty: Tacker unpickles it
    assert handler.drained == [["s3"]]  # done before the script returned
    assert "drained node-s3" in err
    (event,) = await svc.store.events.list()
    assert (event.source, event.operation, event.operation_state) == ("hook", "SCALE", "PROCESSING")


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
    ],
)
async def test_hook_script_has_nothing_to_do(
    start: Start, token_file: Path, operation: str, kind: str, removed: list[str]
) -> None:
    svc = await start(RecordingDrain())
    data = script_input(uid(), uid(), removed, operation=operation, kind=kind)
    rc, out, err = await run_hook(
        data, {"LCCN_HOOK_URL": hook_url(svc), "LCCN_HOOK_TOKEN_FILE": str(token_file)}
    )
    assert (rc, out, err) == (0, "", "")
    assert await svc.store.events.list() == []


async def test_hook_script_unconfigured_warns_and_lets_tacker_go_on() -> None:
    rc, out, err = await run_hook(script_input(uid(), uid(), ["s1"]), {})
    assert (rc, out) == (0, "")
    assert err.count("\n") == 1 and "not configured" in err


async def test_hook_script_fails_clearly(start: Start, token_file: Path, tmp_path: Path) -> None:
    svc = await start(RecordingDrain())
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token-123")
    data = script_input(uid(), uid(), ["s1"])
    rc, out, err = await run_hook(
        data, {"LCCN_HOOK_URL": hook_url(svc), "LCCN_HOOK_TOKEN_FILE": str(wrong)}
    )
    assert (rc, out) == (1, "")
    assert err.count("\n") == 1 and "refused the hook's token" in err
    assert "not-the-token-123" not in err
    # Nobody answers: bounded by its timeout, then a clear failure.
    rc, _, err = await run_hook(
        data,
        {
            "LCCN_HOOK_URL": f"http://127.0.0.1:{free_port()}/lccn/hooks/drain",
            "LCCN_HOOK_TOKEN_FILE": str(token_file),
            "LCCN_HOOK_TIMEOUT": "1",
        },
    )
    assert rc == 1 and "no drain answer within 1 s" in err, err


async def test_the_openapi_document_describes_the_hook(
    start: Start, http: aiohttp.ClientSession
) -> None:
    svc = await start(RecordingDrain())
    async with http.get(f"http://127.0.0.1:{svc.port}{OPENAPI_PATH}") as r:
        doc = await r.json()
    path = svc.settings.hooks.path
    assert set(doc["paths"][path]) == {"post"} and set(doc["paths"][path + "/{vnfLcmOpOccId}"])
    schema = {**doc["components"]["schemas"]["DrainRequest"], "$defs": {}}
    jsonschema.validate(request("i", "o", ["s1"]), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(request("i", "o", []), schema)
    off = await start(RecordingDrain(), token="")
    async with http.get(f"http://127.0.0.1:{off.port}{OPENAPI_PATH}") as r:
        assert path not in (await r.json())["paths"]
