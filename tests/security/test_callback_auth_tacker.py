"""The real Tacker 16.0.0 authenticates to ``serve`` with the credentials ``serve`` generated
for its own subscription, and nothing else gets a notification in.

``serve`` runs as a subprocess with nothing but Tacker configured (``subscribe_on_start``);
the secret Tacker got is read from Tacker's own database (its API never shows it) and
looked for, in clear, everywhere on our side: the store file, serve's log (at debug level),
``config show`` and ``events show``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.factories import identifier
from tests.testbed import tacker_bed as tb
from tests.testbed.tacker_api import TackerClient, unique_name, wait_for
from tests.testbed.tacker_serve import ServeProcess

pytestmark = pytest.mark.tacker

API_PATHS = {"v1": "/vnflcm/v1", "v2": "/vnflcm/v2"}
PARAMS = {"BASIC": "paramsBasic", "OAUTH2_CLIENT_CREDENTIALS": "paramsOauth2ClientCredentials"}


def serve_config(bed: tb.BedState, api: str, generate: str) -> dict[str, Any]:
    """Tacker configured and nothing else about callback auth: what a fresh install has
    (``auth.generate`` only when it is not the default, ``basic``)."""
    config: dict[str, Any] = {
        "tacker": bed.tacker_section(**tb.QUICK_RETRIES, api_version=api, subscribe_on_start=True),
        # Debug: a secret must not reach the log at any level.
        "log": {"format": "json", "level": "DEBUG"},
    }
    if generate != "basic":
        config["auth"] = {"generate": generate}
    return config


def subscriptions_to(tacker: TackerClient, api: str, url: str) -> list[dict[str, Any]]:
    status, _, subs = tacker.call("GET", f"{API_PATHS[api]}/subscriptions")
    assert status == 200, subs
    return [s for s in subs if s.get("callbackUri") == url]


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


StartServe = Callable[[str, str], ServeProcess]


@pytest.fixture
def start_serve(bed: tb.BedState, tacker: TackerClient, tmp_path: Path) -> Iterator[StartServe]:
    """``serve`` subscribed to Tacker by itself; at teardown stopped, its subscriptions gone."""
    started: list[tuple[ServeProcess, str]] = []

    def start(api: str, generate: str) -> ServeProcess:
        home = tmp_path / f"serve-{len(started)}"
        home.mkdir()
        proc = ServeProcess(home, serve_config(bed, api, generate))
        started.append((proc, api))
        proc.start()
        wait_for(
            lambda: subscriptions_to(tacker, api, proc.callback_url),
            timeout=60,
            interval=0.3,
            what="serve's own subscription",
        )
        return proc

    yield start
    for proc, api in started:
        proc.stop()
        for sub in subscriptions_to(tacker, api, proc.callback_url):
            tacker.call("DELETE", f"{API_PATHS[api]}/subscriptions/{sub['id']}")


def create_instance(tacker: TackerClient, bed: tb.BedState) -> str:
    """A new VNF instance: Tacker sends VnfIdentifierCreationNotification to subscribers."""
    status, _, body = tacker.call(
        "POST",
        "/vnflcm/v2/vnf_instances",
        {"vnfdId": bed.vnfd_id, "vnfInstanceName": unique_name("sec-auth")},
    )
    assert status == 201, body
    return str(body["id"])


def held_by_tacker(
    bed: tb.BedState, tacker: TackerClient, proc: ServeProcess, api: str, auth_type: str
) -> tuple[str, str]:
    """(principal, secret) of serve's one subscription, as Tacker keeps them."""
    [sub] = subscriptions_to(tacker, api, proc.callback_url)
    held = tb.stored_subscription_authentication(bed, sub["id"], api)
    assert held is not None and held["authType"] == [auth_type], held
    params = held[PARAMS[auth_type]]
    if auth_type == "OAUTH2_CLIENT_CREDENTIALS":
        # The token endpoint is ours, on the callback's own address.
        assert params["tokenEndpoint"] == f"http://127.0.0.1:{proc.port}/token"
        return params["clientId"], params["clientPassword"]
    return params["userName"], params["password"]


def forged_token(client_id: str) -> str:
    """A well-formed bearer token for ``client_id``, signed by a key of our own making."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    claims = {"sub": client_id, "exp": int(time.time()) + 300, "jti": "forged"}
    payload = b64(json.dumps(claims).encode())
    return f"{payload}.{b64(Ed25519PrivateKey.generate().sign(payload.encode()))}"


def assert_others_refused(proc: ServeProcess, principal: str, secret: str) -> None:
    """Anything but Tacker's credentials gets 401 ProblemDetails and is stored nowhere."""
    forged = identifier("Creation")
    for headers in (
        {},
        {"Authorization": basic(principal, secret + "x")},
        {"Authorization": basic("tacker", secret)},
        {"Authorization": f"Bearer {forged_token(principal)}"},
        {"Authorization": f"Bearer {secret}"},
    ):
        status, rh, body = tb.request("POST", proc.callback_url, forged, headers=headers)
        assert status == 401, (headers, status, body)
        assert rh["Content-Type"].startswith("application/problem+json")
        assert body["status"] == 401 and "WWW-Authenticate" in rh
    assert not [e for e in proc.events() if e["vnfInstanceId"] == forged["vnfInstanceId"]]


def assert_secret_nowhere(proc: ServeProcess, secret: str, principal: str, *event: int) -> None:
    """The secret lives in Tacker only: not in our store file (and its WAL), serve's log
    (at debug level), ``config show`` or ``events show``."""
    parts = [proc.log.read_text(errors="replace")]
    for path in proc.tmp.glob("lccn.db*"):
        parts.append(path.read_bytes().decode("latin-1"))
    parts.append(proc.cli("config", "show").stdout)
    parts += [proc.cli("events", "show", str(e)).stdout for e in event]
    ours = "\n".join(parts)
    assert secret not in ours
    assert principal in ours  # the look did find our texts (a user name is no secret)


# serve's ``callback_auth.generate`` and the authType Tacker then holds for it.
AUTH_TYPES = pytest.mark.parametrize(
    ("generate", "auth_type"),
    [("basic", "BASIC"), ("oauth2", "OAUTH2_CLIENT_CREDENTIALS")],
)


@AUTH_TYPES
def test_only_the_credentials_serve_gave_tacker_get_a_notification_in(
    generate: str,
    auth_type: str,
    bed: tb.BedState,
    tacker: TackerClient,
    start_serve: StartServe,
) -> None:
    proc = start_serve("v2", generate)
    principal, secret = held_by_tacker(bed, tacker, proc, "v2", auth_type)

    # A real Tacker operation: Tacker authenticates, serve stores its notification.
    inst = create_instance(tacker, bed)
    try:

        def stored() -> dict[str, Any] | None:
            return next(
                (
                    e
                    for e in proc.events()
                    if e["vnfInstanceId"] == inst
                    and "IdentifierCreation" in (e["notificationType"] or "")
                ),
                None,
            )

        event = wait_for(stored, timeout=60, interval=0.3, what="Tacker's creation notification")
        assert event["source"] == "http"
        assert_others_refused(proc, principal, secret)
        assert_secret_nowhere(proc, secret, principal, int(event["id"]))
    finally:
        tacker.delete(inst)


@AUTH_TYPES
def test_tacker_v1_presents_the_generated_credentials(
    generate: str,
    auth_type: str,
    bed: tb.BedState,
    tacker: TackerClient,
    start_serve: StartServe,
) -> None:
    """v1: Tacker makes the subscription only after its test GET got 204, sent through the
    same authenticated session its notifications use (the v1 conductor's auth client of the
    subscription); the bed has no default VIM for a v1 instance."""
    proc = start_serve("v1", generate)
    principal, secret = held_by_tacker(bed, tacker, proc, "v1", auth_type)
    assert_others_refused(proc, principal, secret)
    assert_secret_nowhere(proc, secret, principal)


@contextlib.contextmanager
def answering(port: int) -> Iterator[None]:
    """A stand-in for the callback on ``port`` that answers Tacker's test GET (204)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="stand-in", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_subscription_without_credentials_is_replaced_not_trusted(
    bed: tb.BedState, tacker: TackerClient, tmp_path: Path
) -> None:
    """An older serve (or an operator) subscribed our callback without authentication: all
    its notifications would be refused now. serve replaces it with one that carries
    generated credentials, created before the old one is deleted."""
    port = tb.free_port()
    url = f"http://127.0.0.1:{port}/lccn/notifications"
    with answering(port):
        old = tacker.subscribe(url)
    assert tb.stored_subscription_authentication(bed, old, "v2") is None

    proc = ServeProcess(tmp_path, serve_config(bed, "v2", "basic"))
    proc.port = port
    proc.start()
    try:

        def replaced() -> list[dict[str, Any]] | None:
            subs = subscriptions_to(tacker, "v2", url)
            return subs if subs and old not in {s["id"] for s in subs} else None

        [new] = wait_for(replaced, timeout=60, interval=0.3, what="the old subscription replaced")
        held = tb.stored_subscription_authentication(bed, new["id"], "v2")
        assert held is not None and held["authType"] == ["BASIC"]
        records = [
            json.loads(line) for line in proc.log.read_text().splitlines() if line[:1] == "{"
        ]
        assert any(
            r.get("msg", "").startswith("replaced subscriptions") and r.get("replaced") == [old]
            for r in records
        )
    finally:
        proc.stop()
        for sub in subscriptions_to(tacker, "v2", url):
            tacker.unsubscribe(sub["id"])


def test_changed_settings_credentials_replace_the_subscription(
    bed: tb.BedState, tacker: TackerClient, tmp_path: Path
) -> None:
    """The operator changes the callback password in the settings: the subscription Tacker
    holds still carries the old one, so every notification would be refused. serve
    replaces it at start; with the settings unchanged it keeps it."""

    def config(password: str) -> dict[str, Any]:
        return {
            **serve_config(bed, "v2", "basic"),
            "auth": {"basic": {"enabled": True, "username": "tacker", "password": password}},
        }

    def subscription_after_start(password: str, port: int) -> tuple[str, dict[str, Any]]:
        proc = ServeProcess(tmp_path, config(password))
        proc.port = port
        proc.start()
        try:
            held = wait_for(
                lambda: [
                    (s["id"], a)
                    for s in subscriptions_to(tacker, "v2", proc.callback_url)
                    if (a := tb.stored_subscription_authentication(bed, s["id"], "v2"))
                    and a["paramsBasic"]["password"] == password
                ],
                timeout=60,
                interval=0.3,
                what=f"a subscription with the password {password}",
            )
            assert len(subscriptions_to(tacker, "v2", proc.callback_url)) == 1
        finally:
            proc.stop()
        [(sub_id, auth)] = held
        return sub_id, auth

    port = tb.free_port()
    url = f"http://127.0.0.1:{port}/lccn/notifications"
    try:
        first, _ = subscription_after_start("first-password", port)
        again, _ = subscription_after_start("first-password", port)
        assert again == first  # confirmed: kept
        changed, auth = subscription_after_start("second-password", port)
        assert changed != first  # replaced
        assert auth["authType"] == ["BASIC"]
        assert [s["id"] for s in subscriptions_to(tacker, "v2", url)] == [changed]
    finally:
        for sub in subscriptions_to(tacker, "v2", url):
            tacker.unsubscribe(sub["id"])


def test_a_subscription_made_by_the_cli_authenticates_a_running_serve(
    bed: tb.BedState, tacker: TackerClient, tmp_path: Path
) -> None:
    """``lccn-subscriber subscribe`` in another process while serve runs with callback auth
    off: Tacker's test GET carries the credentials the CLI generated, and from then on serve
    takes only those."""
    config = serve_config(bed, "v2", "basic")
    config["tacker"]["subscribe_on_start"] = False
    proc = ServeProcess(tmp_path, config)
    proc.start()
    try:
        _, _, ready = tb.request("GET", f"http://127.0.0.1:{proc.port}/readyz")
        assert ready["checks"]["callback_auth"]["detail"] == "callback auth off"
        out = proc.cli("subscribe", "--callback-uri", proc.callback_url)
        assert "created" in out.stdout and "BASIC (generated)" in out.stdout, out.stdout
        principal, secret = held_by_tacker(bed, tacker, proc, "v2", "BASIC")
        # On from the request after Tacker's test GET (its credentials made serve look).
        wait_for(
            lambda: (
                tb.request("GET", f"http://127.0.0.1:{proc.port}/readyz")[2]["checks"][
                    "callback_auth"
                ]["detail"]
                == "callback auth on: BASIC (generated)"
            ),
            timeout=3,
            what="callback auth on",
        )
        assert_others_refused(proc, principal, secret)
        inst = create_instance(tacker, bed)
        try:
            wait_for(
                lambda: [e for e in proc.events() if e["vnfInstanceId"] == inst],
                timeout=60,
                interval=0.3,
                what="Tacker's creation notification",
            )
        finally:
            tacker.delete(inst)
        assert_secret_nowhere(proc, secret, principal)
    finally:
        proc.stop()
        for sub in subscriptions_to(tacker, "v2", proc.callback_url):
            tacker.unsubscribe(sub["id"])
