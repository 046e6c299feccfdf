"""The callback endpoint over real HTTP on loopback, against a real SQLite file."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import aiohttp
import pytest
import requests
from aiohttp import web
from pydantic import SecretStr

from subscriber.config import AuthSettings, BasicAuthSettings, HttpSettings
from subscriber.service import Service
from tests.conftest import ServiceFactory, callback_url, free_port
from tests.factories import OPERATIONS, STATES, identifier, op_occ, uid, v1_op_occ

pytestmark = pytest.mark.asyncio


async def _post(
    http: aiohttp.ClientSession, svc: Service, body: object, **kw: object
) -> aiohttp.ClientResponse:
    resp = await http.post(callback_url(svc), json=body, **kw)  # type: ignore[arg-type]
    await resp.read()
    return resp


async def test_get_is_tackers_test_notification(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    svc = await start_service()
    async with http.get(callback_url(svc), headers={"Version": "2.0.0"}) as resp:
        assert resp.status == 204


async def test_every_shape_is_accepted_and_stored(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    svc = await start_service()
    bodies = [
        op_occ(operation=op, state=st, verbosity=vb, version=v)
        for op in OPERATIONS
        for st in STATES
        for vb in ("FULL", "SHORT")
        for v in (1, 2)
    ]
    bodies += [identifier(k, version=v) for k in ("Creation", "Deletion") for v in (1, 2)]
    results = await asyncio.gather(*(_post(http, svc, b) for b in bodies))
    assert [r.status for r in results] == [204] * len(bodies)
    stored = await svc.store.events.list()
    assert len(stored) == len(bodies)
    by_op_occ = {e.vnf_lcm_op_occ_id: e for e in stored if e.vnf_lcm_op_occ_id}
    for body in bodies:
        if "vnfLcmOpOccId" in body:
            row = by_op_occ[body["vnfLcmOpOccId"]]
            assert (row.operation, row.operation_state, row.notification_status) == (
                body["operation"],
                body["operationState"],
                body["notificationStatus"],
            )


async def test_204_means_committed_to_the_file(
    start_service: ServiceFactory, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    svc = await start_service()
    body = op_occ(state="COMPLETED")
    resp = await _post(http, svc, body, headers={"Version": "2.0.0"})
    assert resp.status == 204
    # A separate connection to the same file sees it at once: it is committed.
    with sqlite3.connect(tmp_path / "lccn.db") as conn:
        row = conn.execute(
            "SELECT source, api_version, vnf_lcm_op_occ_id FROM events WHERE vnf_lcm_op_occ_id = ?",
            (body["vnfLcmOpOccId"],),
        ).fetchone()
    assert row == ("http", "2.0.0", body["vnfLcmOpOccId"])


async def test_version_header_is_optional(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    svc = await start_service()
    body = op_occ()
    assert (await _post(http, svc, body)).status == 204
    (row,) = await svc.store.events.list()
    assert row.api_version is None


async def test_duplicates_answer_204_and_add_nothing(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    svc = await start_service()
    body = op_occ(state="PROCESSING")
    copies = [dict(body, id=f"resend-{i}") for i in range(10)]  # Tacker makes a new id per send
    results = await asyncio.gather(*(_post(http, svc, c) for c in copies))
    assert {r.status for r in results} == {204}
    assert len(await svc.store.events.list()) == 1
    assert (await _post(http, svc, copies[0])).status == 204
    assert len(await svc.store.events.list()) == 1


async def test_secrets_are_redacted_before_storing(
    start_service: ServiceFactory, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    svc = await start_service()
    body = op_occ(operation="MODIFY_INFO", state="COMPLETED")
    body["changedInfo"]["vimConnectionInfo"]["k8s"]["accessInfo"]["password"] = "pa55w0rd-XYZ"
    body["additionalParams"] = {"master_node": {"username": "ubuntu", "password": "pa55w0rd-XYZ"}}
    assert (await _post(http, svc, body)).status == 204
    await svc.stop()
    raw = (tmp_path / "lccn.db").read_bytes() + b"".join(
        p.read_bytes() for p in tmp_path.glob("lccn.db-wal")
    )
    assert b"pa55w0rd-XYZ" not in raw
    assert b"s3cr3t-bearer-TOKEN-value" not in raw
    assert b"ubuntu" in raw  # non-secret values are kept


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"notificationType": "VnfLcmOperationOccurrenceNotification"}, "id"),
        (op_occ() | {"operationState": "HALFWAY"}, "operationState"),
        (op_occ() | {"operation": "REBOOT"}, "operation"),
        ({k: v for k, v in op_occ().items() if k != "vnfLcmOpOccId"}, "vnfLcmOpOccId"),
        ({"hello": "world"}, "notificationType"),
    ],
)
async def test_schema_errors_are_400_problem_details_naming_the_field(
    start_service: ServiceFactory, http: aiohttp.ClientSession, body: dict[str, object], field: str
) -> None:
    svc = await start_service()
    async with http.post(callback_url(svc), json=body) as resp:
        assert resp.status == 400
        assert resp.content_type == "application/problem+json"
        problem = await resp.json(content_type=None)
    assert problem["status"] == 400
    assert problem["field"] == field
    assert field in problem["detail"]
    assert await svc.store.events.list() == []


async def test_bad_json_is_400(start_service: ServiceFactory, http: aiohttp.ClientSession) -> None:
    svc = await start_service()
    async with http.post(
        callback_url(svc), data=b'{"id": ', headers={"Content-Type": "application/json"}
    ) as resp:
        assert resp.status == 400
        problem = await resp.json(content_type=None)
    assert "JSON" in problem["detail"]


@pytest.mark.parametrize("ctype", ["text/plain", "application/xml", "application/octet-stream"])
async def test_wrong_content_type_is_415(
    start_service: ServiceFactory, http: aiohttp.ClientSession, ctype: str | None
) -> None:
    svc = await start_service()
    data = json.dumps(op_occ()).encode()
    async with http.post(callback_url(svc), data=data, headers={"Content-Type": ctype}) as resp:
        assert resp.status == 415
        assert resp.content_type == "application/problem+json"
    assert await svc.store.events.list() == []


async def test_v1_conductor_posts_are_accepted(start_service: ServiceFactory) -> None:
    """Tacker's v1 conductor (``send_notification``) posts with a ``requests`` session of
    the subscription's auth, ``data=json.dumps(notification)``: no Content-Type, no
    Version. Anything but 204 makes it retry 3 x 10 s, then drop the notification."""
    password = "pw-v1-callback"
    svc = await start_service(
        update={
            "auth": AuthSettings(
                basic=BasicAuthSettings(
                    enabled=True, username="tacker", password=SecretStr(password)
                )
            )
        }
    )
    instance = uid()
    bodies = [
        v1_op_occ(instance=instance, state=state)
        for state in ("STARTING", "PROCESSING", "COMPLETED", "FAILED_TEMP")
    ]

    def post_like_tacker(body: dict[str, object]) -> tuple[int, dict[str, str]]:
        with requests.Session() as session:
            session.auth = requests.auth.HTTPBasicAuth("tacker", password)
            resp = session.post(callback_url(svc), data=json.dumps(body), timeout=10)
            return resp.status_code, dict(resp.request.headers)

    for body in bodies:
        status, sent = await asyncio.to_thread(post_like_tacker, body)
        assert "Content-Type" not in sent and "Version" not in sent  # as the conductor's
        assert status == 204, body["operationState"]
    stored = sorted(await svc.store.events.list(vnf_instance_id=instance), key=lambda e: e.id)
    assert [(e.operation_state, e.notification_status, e.api_version) for e in stored] == [
        ("STARTING", "START", None),
        ("PROCESSING", "START", None),
        ("COMPLETED", "RESULT", None),
        ("FAILED_TEMP", "RESULT", None),
    ]


async def test_oversized_body_is_413_without_reading_it_all(
    start_service: ServiceFactory,
) -> None:
    svc = await start_service()
    cap = svc.settings.http.max_body_bytes
    # Announce a huge body but send only its first bytes: the server must answer
    # from the Content-Length alone instead of waiting for the rest.
    reader, writer = await asyncio.open_connection("127.0.0.1", svc.port)
    writer.write(
        (
            f"POST {svc.settings.http.path} HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {cap * 4}\r\n\r\n"
        ).encode()
        + b"{" * 1000
    )
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 5)
    assert b" 413 " in status_line
    writer.close()
    await writer.wait_closed()


async def test_a_declared_length_up_to_the_cap_is_read_whole_and_one_past_is_413(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    cap = 4096
    svc = await start_service(
        update={"http": HttpSettings(host="127.0.0.1", port=free_port(), max_body_bytes=cap)}
    )
    bodies = []
    for pad in (cap, cap + 1):  # JSON with trailing blanks, Content-Length given
        raw = json.dumps(op_occ()).encode()
        bodies.append(raw + b" " * (pad - len(raw)))
    headers = {"Content-Type": "application/json"}
    async with http.post(callback_url(svc), data=bodies[0], headers=headers) as resp:
        assert resp.status == 204
    async with http.post(callback_url(svc), data=bodies[1], headers=headers) as resp:
        assert resp.status == 413
    [stored] = await svc.store.events.list()
    assert json.loads(stored.body) == json.loads(bodies[0])


async def test_oversized_chunked_body_is_413(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    svc = await start_service()
    cap = svc.settings.http.max_body_bytes

    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(cap // 65536 + 2):
            yield b" " * 65536

    try:
        async with http.post(
            callback_url(svc), data=chunks(), headers={"Content-Type": "application/json"}
        ) as resp:
            assert resp.status == 413
    except aiohttp.ClientError:
        pytest.fail("the server should answer 413 rather than drop the connection")
    assert await svc.store.events.list() == []


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
async def test_other_methods_are_405(
    start_service: ServiceFactory, http: aiohttp.ClientSession, method: str
) -> None:
    svc = await start_service()
    async with http.request(method, callback_url(svc)) as resp:
        assert resp.status == 405
        assert resp.content_type == "application/problem+json"
        assert "POST" in resp.headers.get("Allow", "")


async def test_accepted_events_survive_a_bad_request(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    svc = await start_service()
    good = op_occ()
    assert (await _post(http, svc, good)).status == 204
    async with http.post(callback_url(svc), json={"broken": True}) as resp:
        assert resp.status == 400
    rows = await svc.store.events.list()
    assert [r.vnf_lcm_op_occ_id for r in rows] == [good["vnfLcmOpOccId"]]


async def test_an_unexpected_error_is_a_500_problem_with_a_request_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from subscriber.config import HttpSettings
    from subscriber.ingest.http import make_app

    async def boom(request: web.Request) -> web.Response:
        await request.read()
        raise RuntimeError("broken while holding password=hunter2-xyz")

    app = make_app(HttpSettings(), None)  # type: ignore[arg-type]
    app.router.add_post("/boom", boom)
    caplog.set_level("ERROR", logger="subscriber.ingest.problems")
    async with TestClient(TestServer(app)) as client:
        resp = await client.post("/boom", data=b'{"echo": "me-not-in-the-answer"}')
        assert resp.status == 500
        assert resp.content_type == "application/problem+json"
        problem = await resp.json(content_type=None)
    request_id = resp.headers["X-Request-Id"]
    assert problem["status"] == 500 and request_id in problem["detail"]
    assert "hunter2" not in str(problem) and "me-not-in-the-answer" not in str(problem)
    (record,) = [r for r in caplog.records if r.getMessage() == "request failed"]
    assert record.request_id == request_id  # type: ignore[attr-defined]
    assert "hunter2" not in record.error  # type: ignore[attr-defined]
