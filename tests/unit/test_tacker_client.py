"""The Tacker client against small aiohttp servers that answer like Tacker (TACKER.md §4-§5):
retry/backoff classification, write-back shape and echo intents, VIM registration, Keystone."""

from __future__ import annotations

import ast
import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from schemas import parse_notification_data
from schemas.lcm import operation_params
from subscriber.config import TackerSettings
from subscriber.errors import (
    TackerAuthError,
    TackerConflict,
    TackerOpFailed,
    TackerRejected,
    TackerUnavailable,
)
from subscriber.kernel.ports import KubernetesAccess
from subscriber.metrics import Metrics
from subscriber.service import Service
from subscriber.store import Store
from subscriber.tacker import EchoFilter, TackerClient
from subscriber.tacker.echo import is_own_patch
from subscriber.tacker.reconciler import implied_states, notification_status, synthesise
from tests import REPO
from tests.conftest import make_settings, scrape
from tests.factories import op_occ
from tests.unit.scripted_tacker import ScriptedTacker

TOKEN = "k8s-bearer-" + uuid.uuid4().hex
ACCESS = KubernetesAccess(
    endpoint="https://10.0.0.5:6443",
    ssl_ca_cert="-----BEGIN CERTIFICATE-----x",
    bearer_token=SecretStr(TOKEN),
)

Route = Callable[[web.Request], Any]


def settings(url: str, **kw: Any) -> TackerSettings:
    base: dict[str, Any] = {
        "endpoint": url,
        "retry_attempts": 4,
        "retry_initial": 0.01,
        "retry_max": 0.05,
        "op_poll_interval": 0.01,
        "noauth_user_id": "u" * 32,
        "noauth_project_id": "p" * 32,
    }
    return TackerSettings(**{**base, **kw})


INST = "/vnflcm/v2/vnf_instances/inst-1"


def retries(text: str) -> dict[str, float]:
    """``lccn_tacker_retries_total`` by status, from the exposition ``text``."""
    return {
        sample.labels["status"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "lccn_tacker_retries_total"
    }


async def test_409_then_503_then_success_is_retried(fake: ScriptedTacker) -> None:
    fake.on("GET", INST, 409, 503, 502, (200, {"id": "inst-1"}))
    metrics = Metrics()
    async with TackerClient(settings(fake.url), on_retry=metrics.tacker_retried) as client:
        assert await client.get_vnf_instance("inst-1") == {"id": "inst-1"}
    assert retries(metrics.render().decode()) == {"409": 1, "503": 1, "502": 1}
    # Every call carries Version and the noauth context.
    _, _, headers, _ = fake.seen[-1]
    assert headers["Version"] == "2.0.0"
    assert headers["X-Project-Id"] == "p" * 32 and headers["X-Roles"] == "admin"


async def test_409_past_the_bound_is_transient(fake: ScriptedTacker) -> None:
    detail = {"status": 409, "detail": "Other LCM operation of vnfInstance inst-1 is in progress."}
    fake.on("PATCH", INST, (409, detail))
    async with TackerClient(settings(fake.url)) as client:
        with pytest.raises(TackerConflict) as info:
            await client.patch_vnf_instance("inst-1", {"vnfInstanceName": "x"})
    assert info.value.retriable
    assert "in progress" in info.value.message and "after 4 attempts" in info.value.message
    assert len(fake.seen) == 4


async def test_the_service_counts_tacker_retries_on_metrics(
    fake: ScriptedTacker, db_url: str, http: aiohttp.ClientSession
) -> None:
    """What an operator sees of a busy or failing Tacker: retries by status on /metrics."""
    fake.on("GET", INST, 409, 409, 503, (200, {"id": "inst-1"}))
    config = make_settings(db_url, update={"tacker": settings(fake.url)})
    async with Service(config) as svc:
        assert svc.tacker is not None
        assert retries(await scrape(http, svc)) == {}
        await svc.tacker.get_vnf_instance("inst-1")
        assert retries(await scrape(http, svc)) == {"409": 2, "503": 1}


async def test_5xx_past_the_bound_is_transient(fake: ScriptedTacker) -> None:
    fake.on("GET", INST, 503)
    async with TackerClient(settings(fake.url, retry_attempts=2)) as client:
        with pytest.raises(TackerUnavailable) as info:
            await client.get_vnf_instance("inst-1")
    assert info.value.retriable and info.value.status == 503


async def test_4xx_is_permanent_with_problem_detail_and_no_retry(fake: ScriptedTacker) -> None:
    detail = {"status": 400, "title": "Bad Request", "detail": f"bad vimConnectionInfo {TOKEN}"}
    fake.on("PATCH", INST, (400, detail))
    async with TackerClient(settings(fake.url)) as client:
        with pytest.raises(TackerRejected) as info:
            await client.patch_vnf_instance("inst-1", {"vimConnectionInfo": {}})
    assert not info.value.retriable
    assert "400 bad vimConnectionInfo" in info.value.message
    assert len(fake.seen) == 1


async def test_unreachable_is_transient() -> None:
    from tests.conftest import free_port

    async with TackerClient(settings(f"http://127.0.0.1:{free_port()}", retry_attempts=2)) as c:
        with pytest.raises(TackerUnavailable) as info:
            await c.get_vnf_instance("inst-1")
    assert info.value.retriable and info.value.status is None


async def test_401_refreshes_the_token_once(fake: ScriptedTacker) -> None:
    class CountingAuth:
        def __init__(self) -> None:
            self.invalidated = 0

        async def endpoint(self) -> str:
            return fake.url

        async def headers(self) -> dict[str, str]:
            return {"X-Auth-Token": f"tok{self.invalidated}"}

        async def invalidate(self) -> None:
            self.invalidated += 1

        def close(self) -> None:
            return None

    auth = CountingAuth()
    fake.on("GET", INST, 401, (200, {"id": "inst-1"}))
    async with TackerClient(settings(fake.url), auth=auth) as client:
        assert await client.get_vnf_instance("inst-1") == {"id": "inst-1"}
    assert auth.invalidated == 1
    assert [h["X-Auth-Token"] for _, _, h, _ in fake.seen] == ["tok0", "tok1"]
    # A second 401 in a row is an auth failure, not a loop.
    fake.on("GET", INST, 401)
    async with TackerClient(settings(fake.url), auth=CountingAuth()) as client:
        with pytest.raises(TackerAuthError):
            await client.get_vnf_instance("inst-1")


async def test_write_back_v2_sends_the_complete_entry_and_records_the_echo(
    fake: ScriptedTacker, store: Store
) -> None:
    occ = f"occ-{uuid.uuid4().hex[:8]}"
    loc = {"Location": f"{fake.url}/vnflcm/v2/vnf_lcm_op_occs/{occ}"}
    fake.on("PATCH", INST, 409, (202, None, loc))
    fake.on(
        "GET",
        f"/vnflcm/v2/vnf_lcm_op_occs/{occ}",
        (200, {"id": occ, "operation": "MODIFY_INFO", "operationState": "PROCESSING"}),
        (200, {"id": occ, "operation": "MODIFY_INFO", "operationState": "COMPLETED"}),
    )
    async with TackerClient(settings(fake.url), echo=store.tacker) as client:
        assert await client.write_back("inst-1", ACCESS) == occ
    patches = [s for s in fake.seen if s[0] == "PATCH"]
    _, _, headers, body = patches[-1]
    assert headers["Content-Type"] == "application/merge-patch+json"
    entry = body["vimConnectionInfo"]["k8s"]
    assert entry["vimType"] == "ETSINFV.KUBERNETES.V_1"
    assert entry["interfaceInfo"] == {
        "endpoint": ACCESS.endpoint,
        "ssl_ca_cert": ACCESS.ssl_ca_cert,
    }
    assert entry["accessInfo"] == {"bearer_token": TOKEN}
    assert entry["vimId"]
    assert is_own_patch(body, "inst-1", "k8s")
    assert await store.tacker.is_own(occ)
    assert await store.tacker.open_intents("inst-1", 0) == 0


async def test_write_back_v1_uses_the_list_form(fake: ScriptedTacker, store: Store) -> None:
    """v1 (TACKER.md §4): the list merge keeps a request's entry as given and puts the
    request's entries first; Tacker reads entries back snake_case and uses the first one.
    So ours is written snake_case, after the instance's own entries named by id, and
    without the token or CA (v1 shows entries and the PATCH request unmasked)."""
    occ = "occ-v1"
    openstack_entry = {"id": "vim-conn-os", "vimId": "os-vim", "vimType": "openstack"}
    fake.on(
        "GET",
        "/vnflcm/v1/vnf_instances/inst-1",
        (200, {"id": "inst-1", "vimConnectionInfo": [openstack_entry]}),
    )
    fake.on(
        "PATCH",
        "/vnflcm/v1/vnf_instances/inst-1",
        (202, None, {"Location": f"{fake.url}/vnflcm/v1/vnf_lcm_op_occs/{occ}"}),
    )
    # Tacker 16.0.0 cannot show a v1 MODIFY_INFO (500: it parses the Python text of its
    # request as JSON); the list, filtered by id, leaves the request out.
    fake.on("GET", f"/vnflcm/v1/vnf_lcm_op_occs/{occ}", (500, {"status": 500, "detail": "x"}))
    fake.on(
        "GET", "/vnflcm/v1/vnf_lcm_op_occs", (200, [{"id": occ, "operationState": "COMPLETED"}])
    )
    access = KubernetesAccess(
        endpoint=ACCESS.endpoint,
        ssl_ca_cert=ACCESS.ssl_ca_cert,
        bearer_token=ACCESS.bearer_token,
        vim_id="k8s-vim-1",
    )
    async with TackerClient(settings(fake.url), echo=store.tacker) as client:
        await client.write_back("inst-1", access, api="v1")
        await client.clear_write_back("inst-1", api="v1")
    first, second = (s for s in fake.seen if s[0] == "PATCH")
    assert first[2]["Version"] == "1.3.0"
    assert not [s for s in fake.seen if s[1] == f"/vnflcm/v1/vnf_lcm_op_occs/{occ}"]
    other, entry = first[3]["vimConnectionInfo"]
    assert other == {"id": "vim-conn-os"}
    assert entry == {
        "id": entry["id"],
        "vim_id": "k8s-vim-1",
        "vim_type": "kubernetes",
        "interface_info": {},
        "access_info": {"auth_url": ACCESS.endpoint},
    }
    assert TOKEN not in str(first[3]) and "CERTIFICATE" not in str(first[3])
    assert is_own_patch(first[3], "inst-1", "k8s")
    # v1 keeps a MODIFY_INFO's request as the text of a Python dict.
    assert is_own_patch(operation_params({"operationParams": str(first[3])}), "inst-1", "k8s")
    other, cleared = second[3]["vimConnectionInfo"]
    assert other == {"id": "vim-conn-os"}
    assert cleared == {"id": entry["id"], "interface_info": {}, "access_info": {}}


async def test_v1_write_back_waits_for_the_op_occ_the_conductor_has_not_made_yet(
    fake: ScriptedTacker, store: Store
) -> None:
    """v1's PATCH answers 202 with the op-occ's id before the conductor has made the op-occ
    (the API casts the update), so the list may not have it at first: that is waiting, not
    a failure (a failed write-back step would be tried again and find its entry there)."""
    occ = "occ-v1-late"
    fake.on("GET", "/vnflcm/v1/vnf_instances/inst-1", (200, {"id": "inst-1"}))
    fake.on(
        "PATCH",
        "/vnflcm/v1/vnf_instances/inst-1",
        (202, None, {"Location": f"{fake.url}/vnflcm/v1/vnf_lcm_op_occs/{occ}"}),
    )
    listed = {"id": occ, "operation": "MODIFY_INFO"}
    fake.on(
        "GET",
        "/vnflcm/v1/vnf_lcm_op_occs",
        (200, []),
        (200, []),
        (200, [{**listed, "operationState": "PROCESSING"}]),
        (200, [{**listed, "operationState": "COMPLETED"}]),
    )
    async with TackerClient(settings(fake.url), echo=store.tacker) as client:
        assert await client.write_back("inst-1", ACCESS, api="v1") == occ
    assert len([s for s in fake.seen if s[1] == "/vnflcm/v1/vnf_lcm_op_occs"]) == 4

    # Never listed: it times out as still waiting, naming why.
    fake.on("GET", "/vnflcm/v1/vnf_lcm_op_occs", (200, []))
    async with TackerClient(settings(fake.url, op_wait_timeout=0.2), echo=store.tacker) as c:
        with pytest.raises(TackerUnavailable, match="not listed after waiting"):
            await c.write_back("inst-1", ACCESS, api="v1")


async def test_write_back_refused_or_failed(fake: ScriptedTacker, store: Store) -> None:
    fake.on("PATCH", INST, (400, {"status": 400, "detail": "NOT_INSTANTIATED"}))
    async with TackerClient(settings(fake.url), echo=store.tacker) as client:
        with pytest.raises(TackerRejected, match="NOT_INSTANTIATED"):
            await client.write_back("inst-1", ACCESS)
        # No op-occ was made: the intent is gone, so no MODIFY_INFO is taken for ours.
        assert await store.tacker.open_intents("inst-1", 0) == 0
        occ = "occ-failed"
        fake.on("PATCH", INST, (202, None, {"Location": f"x/vnf_lcm_op_occs/{occ}"}))
        fake.on(
            "GET",
            f"/vnflcm/v2/vnf_lcm_op_occs/{occ}",
            (200, {"operationState": "FAILED_TEMP", "error": {"detail": "script failed"}}),
        )
        with pytest.raises(TackerOpFailed, match="FAILED_TEMP: script failed") as info:
            await client.write_back("inst-1", ACCESS)
        assert not info.value.retriable
    assert TOKEN not in str(info.value)


class MemoryEchoRecorder:
    """An in-memory EchoRecorder and EchoLedger that notes when each call came."""

    def __init__(self, fake: ScriptedTacker) -> None:
        self.fake = fake
        self.calls: list[tuple[str, Any, ...]] = []
        self.intents: dict[int, tuple[str, str | None]] = {}
        self.own: set[str] = set()

    def _patches(self) -> int:
        return sum(1 for s in self.fake.seen if s[0] == "PATCH")

    async def expect_echo(self, vnf_instance_id: str) -> int:
        intent = len(self.intents) + 1
        self.intents[intent] = (vnf_instance_id, None)
        self.calls.append(("expect", vnf_instance_id, self._patches()))
        return intent

    async def confirm_echo(self, intent_id: int, op_occ_id: str) -> None:
        self.intents[intent_id] = (self.intents[intent_id][0], op_occ_id)
        self.own.add(op_occ_id)
        self.calls.append(("confirm", intent_id, op_occ_id, self._patches()))

    async def drop_echo(self, intent_id: int) -> None:
        del self.intents[intent_id]
        self.calls.append(("drop", intent_id, self._patches()))

    async def is_own(self, op_occ_id: str) -> bool:
        return op_occ_id in self.own

    async def open_intents(self, vnf_instance_id: str, since: float) -> int:
        return sum(1 for i, o in self.intents.values() if i == vnf_instance_id and o is None)

    async def record_own(self, vnf_instance_id: str, op_occ_id: str) -> None:
        self.own.add(op_occ_id)
        self.calls.append(("record_own", vnf_instance_id, op_occ_id))


async def test_write_back_notes_the_echo_through_its_port_before_the_patch(
    fake: ScriptedTacker,
) -> None:
    recorder = MemoryEchoRecorder(fake)
    occ = f"occ-{uuid.uuid4().hex[:8]}"
    fake.on("PATCH", INST, (202, None, {"Location": f"{fake.url}/x/vnf_lcm_op_occs/{occ}"}))
    fake.on("GET", f"/vnflcm/v2/vnf_lcm_op_occs/{occ}", (200, {"operationState": "COMPLETED"}))
    async with TackerClient(settings(fake.url), echo=recorder) as client:
        assert await client.write_back("inst-1", ACCESS) == occ
        # Noted while no PATCH had arrived; confirmed once the 202 was in.
        assert recorder.calls == [("expect", "inst-1", 0), ("confirm", 1, occ, 1)]
        fake.on("PATCH", INST, (422, {"status": 422, "detail": "bad entry"}))
        with pytest.raises(TackerRejected):
            await client.write_back("inst-1", ACCESS)
        assert recorder.calls[2:] == [("expect", "inst-1", 1), ("drop", 2, 2)]
    assert recorder.intents == {1: ("inst-1", occ)}


async def test_echo_filter_reads_its_ledger_port_and_checks_open_notes_with_tacker(
    fake: ScriptedTacker,
) -> None:
    ledger = MemoryEchoRecorder(fake)
    inst, occ = f"inst-{uuid.uuid4().hex[:8]}", f"occ-{uuid.uuid4().hex[:8]}"
    notification = parse_notification_data(
        op_occ(instance=inst, op_occ_id=occ, operation="MODIFY_INFO", state="PROCESSING")
    )
    occ_path = f"/vnflcm/v2/vnf_lcm_op_occs/{occ}"
    ours = {"vimConnectionInfo": {"k8s": {"vimId": "x"}}}
    fake.on("GET", occ_path, (200, {"id": occ, "operationParams": ours}))
    async with TackerClient(settings(fake.url)) as client:
        echo = EchoFilter(ledger, settings(fake.url), client)
        assert not await echo.is_echo(notification)  # no open note: not even asked
        assert not [s for s in fake.seen if s[1] == occ_path]
        await ledger.expect_echo(inst)  # a PATCH whose 202 never came back
        assert await echo.is_echo(notification)
        assert ("record_own", inst, occ) in ledger.calls
        assert await EchoFilter(ledger, settings(fake.url)).is_echo(notification)


@pytest.mark.parametrize("version", [1, 2])
async def test_echo_filter_waits_for_the_202_of_a_patch_in_flight(
    fake: ScriptedTacker, version: int
) -> None:
    """Tacker notifies a MODIFY_INFO before its PATCH's 202 is recorded (v1 casts it to the
    conductor): the filter waits for the 202 rather than ask Tacker, which v1 cannot
    answer."""
    ledger = MemoryEchoRecorder(fake)
    inst, occ = f"inst-{uuid.uuid4().hex[:8]}", f"occ-{uuid.uuid4().hex[:8]}"
    notification = parse_notification_data(
        op_occ(
            instance=inst,
            op_occ_id=occ,
            operation="MODIFY_INFO",
            state="PROCESSING",
            version=version,
        )
    )
    intent = await ledger.expect_echo(inst)

    async def answered() -> None:
        await asyncio.sleep(0.3)
        await ledger.confirm_echo(intent, occ)

    async with TackerClient(settings(fake.url)) as client:
        echo = EchoFilter(ledger, settings(fake.url), client)
        confirming = asyncio.create_task(answered())
        assert await echo.is_echo(notification)
        await confirming
        assert fake.seen == []  # Tacker was never asked
        # An operator's MODIFY_INFO while another PATCH of ours is in flight and answered
        # with its own op-occ: not ours.
        other = await ledger.expect_echo(inst)
        theirs = parse_notification_data(
            op_occ(instance=inst, operation="MODIFY_INFO", state="PROCESSING", version=version)
        )
        confirming = asyncio.create_task(ledger.confirm_echo(other, "occ-ours"))
        assert not await echo.is_echo(theirs)
        await confirming
        assert fake.seen == []


async def test_echo_filter_does_not_ask_v1_for_a_modify_info_it_cannot_show(
    fake: ScriptedTacker,
) -> None:
    ledger = MemoryEchoRecorder(fake)
    inst = f"inst-{uuid.uuid4().hex[:8]}"
    notification = parse_notification_data(
        op_occ(instance=inst, operation="MODIFY_INFO", state="PROCESSING", version=1)
    )
    await ledger.expect_echo(inst)  # a PATCH whose 202 never came back
    async with TackerClient(settings(fake.url)) as client:
        echo = EchoFilter(ledger, settings(fake.url, echo_confirm_wait=0.1), client)
        assert not await echo.is_echo(notification)
    assert fake.seen == []


def test_our_status_report_is_an_own_patch_and_nothing_else_is() -> None:
    entry = {"state": "done", "operation": "INSTANTIATE"}
    assert is_own_patch({"metadata": {"lccn": entry}}, "inst-1", "k8s")
    assert is_own_patch({"metadata": {"lccn": json.dumps(entry)}}, "inst-1", "k8s")  # v1 text
    assert not is_own_patch({"metadata": {"lccn": entry, "owner": "x"}}, "inst-1", "k8s")
    assert not is_own_patch({"metadata": {"lccn": entry}, "vnfInstanceName": "x"}, "i", "k8s")
    assert not is_own_patch({"metadata": "lccn"}, "inst-1", "k8s")


def test_the_client_and_the_echo_filter_do_not_import_the_store() -> None:
    package = REPO / "subscriber" / "tacker"
    for name in ("client.py", "echo.py", "ports.py"):
        tree = ast.parse((package / name).read_text())
        imported = {
            node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        } | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        assert not {m for m in imported if m.startswith("subscriber.store")}, name


async def test_vim_registration_follows_the_v1_0_exchange(fake: ScriptedTacker) -> None:
    """Recorded from TACKER.md §5 (the real exchange, with Barbican and a real API server,
    is ``tests/k8s/test_full_loop.py``); this fake answers as Tacker does."""
    vim_id = str(uuid.uuid4())
    fake.on("GET", "/v1.0/vims", (200, {"vims": []}))
    fake.on("POST", "/v1.0/vims", (201, {"vim": {"id": vim_id, "name": "kubernetes_vim_x"}}))
    async with TackerClient(settings(fake.url)) as off:
        assert await off.register_vim("kubernetes_vim_x", ACCESS) is None
    async with TackerClient(settings(fake.url, register_vim=True)) as client:
        assert await client.register_vim("kubernetes_vim_x", ACCESS) == vim_id
        post = next(s for s in fake.seen if s[0] == "POST")
        assert "Version" not in post[2]
        vim = post[3]["vim"]
        assert vim["type"] == "kubernetes" and vim["auth_url"] == ACCESS.endpoint
        assert vim["auth_cred"] == {"bearer_token": TOKEN, "ssl_ca_cert": ACCESS.ssl_ca_cert}
        assert vim["tenant_id"] == "p" * 32
        # Same name and URL: reused, not posted again.
        fake.on(
            "GET",
            "/v1.0/vims",
            (
                200,
                {
                    "vims": [
                        {
                            "id": vim_id,
                            "name": "kubernetes_vim_x",
                            "auth_url": ACCESS.endpoint,
                            "description": vim["description"],  # what marks it ours
                        }
                    ]
                },
            ),
        )
        assert await client.register_vim("kubernetes_vim_x", ACCESS) == vim_id
        assert sum(s[0] == "POST" for s in fake.seen) == 1
        fake.on("DELETE", f"/v1.0/vims/{vim_id}", 204)
        assert await client.delete_vim("kubernetes_vim_x") == ["kubernetes_vim_x"]
        fake.on("GET", "/v1.0/vims", (200, {"vims": []}))
        assert await client.delete_vim("kubernetes_vim_x") == []
    # Unset, as by default: the instances of the v1 API only (Tacker's v1 driver did).
    async with TackerClient(settings(fake.url)) as default:
        assert default.registers_vims("v1") and not default.registers_vims("v2")
        assert await default.register_vim("kubernetes_vim_x", ACCESS, api="v2") is None
        assert await default.register_vim("kubernetes_vim_x", ACCESS, api="v1") == vim_id


def test_synthesised_notifications_follow_tackers_rules() -> None:
    assert implied_states("INSTANTIATE", "COMPLETED") == ["STARTING", "PROCESSING"]
    assert implied_states("MODIFY_INFO", "COMPLETED") == ["PROCESSING"]
    assert implied_states("SCALE", "ROLLED_BACK") == ["STARTING"]
    assert implied_states("HEAL", "STARTING") == []
    assert notification_status("MODIFY_INFO", "PROCESSING", "v2") == "START"
    assert notification_status("SCALE", "PROCESSING", "v2") == "RESULT"
    assert notification_status("SCALE", "PROCESSING", "v1") == "START"
    occ = {
        "id": "o1",
        "operation": "SCALE",
        "operationState": "FAILED_TEMP",
        "vnfInstanceId": "i1",
        "stateEnteredTime": "2026-05-01T00:00:00Z",
        "isAutomaticInvocation": False,
        "resourceChanges": {"affectedVnfcs": [{"id": "v"}]},
        "error": {"status": 500, "detail": "boom"},
    }
    body = synthesise(occ, "FAILED_TEMP", api="v2", subscription_id="s", current=True)
    assert body["notificationStatus"] == "RESULT" and body["error"]["detail"] == "boom"
    assert body["affectedVnfcs"] == [{"id": "v"}] and body["timeStamp"] == occ["stateEnteredTime"]
    past = synthesise(occ, "STARTING", api="v2", subscription_id="s", current=False)
    assert past["notificationStatus"] == "START" and "error" not in past
