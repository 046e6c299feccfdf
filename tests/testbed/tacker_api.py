"""Driving the bed's Tacker as its user does: a Tacker v2 client, a callback recorder, polling.

All synchronous: Tacker, the simulator and ``serve`` are separate processes, and the
tests (and the demo) drive them over HTTP from one thread (no event loop shared across
a session).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.testbed import tacker_bed

__all__ = [
    "LOCK_WAITS",
    "NETWORK_ID",
    "TERMINAL_STATES",
    "CallbackRecorder",
    "TackerClient",
    "ext_virtual_links",
    "instantiate_request",
    "terminate_and_delete",
    "unique_name",
    "wait_for",
]

# Seconds each DELETE after TERMINATE waited on 409 (Tacker's lock outlives COMPLETED).
LOCK_WAITS: list[float] = []
TERMINAL_STATES = {"COMPLETED", "FAILED_TEMP", "FAILED", "ROLLED_BACK"}
# Our sample network (a Neutron net id as Tacker would pass it through to Heat).
NETWORK_ID = "8a5c7f0e-3b2d-4c1e-9f6a-0d1e2f3a4b5c"


def wait_for(
    condition: Callable[[], Any], *, timeout: float = 60.0, interval: float = 0.1, what: str = ""
) -> Any:
    """Poll ``condition`` until it returns something truthy; return it (else AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(interval)


class TackerClient:
    """The v2 VNF LCM calls the tests need, against one test bed (:attr:`lcm` and
    :attr:`version` name the API; :class:`~tests.testbed.tacker_v1.V1Tacker` is v1's)."""

    lcm = "/vnflcm/v2"
    version: dict[str, str] = {}  # the bed's default headers carry v2's Version

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def call(
        self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None
    ) -> tuple[int, dict, Any]:
        headers = {**self.version, **(headers or {})}
        return tacker_bed.request(method, f"{self.url}{path}", body, headers=headers)

    def _ok(self, expected: int, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, headers, resp = self.call(method, path, body, **kw)
        assert status == expected, f"{method} {path}: {status} {resp}"
        return headers, resp

    def subscribe(self, callback_uri: str) -> str:
        _, body = self._ok(201, "POST", f"{self.lcm}/subscriptions", {"callbackUri": callback_uri})
        return str(body["id"])

    def unsubscribe(self, sub_id: str) -> None:
        self.call("DELETE", f"{self.lcm}/subscriptions/{sub_id}")

    def subscriptions(self, callback_uri: str | None = None) -> list[dict[str, Any]]:
        """The subscriptions (only those that call ``callback_uri`` back, when given)."""
        subs = self._ok(200, "GET", f"{self.lcm}/subscriptions")[1] or []
        return [s for s in subs if callback_uri is None or s.get("callbackUri") == callback_uri]

    def wait_subscribed(self, callback_uri: str, timeout: float = 30.0) -> None:
        """Until a subscription calls ``callback_uri`` back (serve subscribes itself)."""
        wait_for(
            lambda: self.subscriptions(callback_uri),
            timeout=timeout,
            interval=0.2,
            what=f"a subscription calling {callback_uri} back",
        )

    def unsubscribe_all(self, callback_uri: str) -> None:
        """Delete every subscription that calls ``callback_uri`` back."""
        for sub in self.subscriptions(callback_uri):
            self.unsubscribe(sub["id"])

    def create(self, vnfd_id: str, name: str) -> str:
        _, body = self._ok(
            201, "POST", f"{self.lcm}/vnf_instances", {"vnfdId": vnfd_id, "vnfInstanceName": name}
        )
        return str(body["id"])

    def delete(self, inst_id: str, timeout: float = 30.0) -> None:
        """DELETE the instance, retrying 409: Tacker still holds the instance's lock for a
        moment after the last op-occ reads COMPLETED."""
        t0 = time.monotonic()
        conflicts = 0

        def attempt() -> bool:
            nonlocal conflicts
            status, _, body = self.call("DELETE", f"{self.lcm}/vnf_instances/{inst_id}")
            assert status in (204, 409), f"DELETE {inst_id}: {status} {body}"
            conflicts += status == 409
            return status == 204

        wait_for(attempt, timeout=timeout, interval=0.2, what=f"DELETE {inst_id}")
        LOCK_WAITS.append(time.monotonic() - t0 if conflicts else 0.0)

    def show(self, inst_id: str) -> dict[str, Any]:
        return self._ok(200, "GET", f"{self.lcm}/vnf_instances/{inst_id}")[1]  # type: ignore[no-any-return]

    def op_occ(self, occ_id: str) -> dict[str, Any]:
        return self._ok(200, "GET", f"{self.lcm}/vnf_lcm_op_occs/{occ_id}")[1]  # type: ignore[no-any-return]

    def op_occs(self) -> list[dict[str, Any]]:
        return self._ok(200, "GET", f"{self.lcm}/vnf_lcm_op_occs")[1]  # type: ignore[no-any-return]

    def start_op(self, inst_id: str, task: str, body: dict[str, Any]) -> str:
        """POST an LCM task (instantiate, scale, heal, terminate); returns the op-occ id.

        Tacker still holds the instance lock for a moment after an op-occ reads
        COMPLETED (its last notification is sent from a thread under the lock),
        so a task started right after another gets 409 for up to ~0.3 s: retry
        those, briefly, as an operator's client would.
        """
        path = f"{self.lcm}/vnf_instances/{inst_id}/{task}"
        deadline = time.monotonic() + 10.0
        while True:
            status, headers, resp = self.call("POST", path, body)
            if status == 409 and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            assert status == 202, f"POST {path}: {status} {resp}"
            return str(headers["Location"].rsplit("/", 1)[1])

    def modify(self, inst_id: str, body: dict[str, Any]) -> str:
        headers, _ = self._ok(
            202,
            "PATCH",
            f"{self.lcm}/vnf_instances/{inst_id}",
            body,
            headers={"Content-Type": "application/merge-patch+json"},
        )
        return str(headers["Location"].rsplit("/", 1)[1])

    def wait_op(self, occ_id: str, timeout: float = 90.0) -> dict[str, Any]:
        """Wait until the op-occ is in a terminal (or FAILED_TEMP) state; returns it."""
        return wait_for(  # type: ignore[no-any-return]
            lambda: (o := self.op_occ(occ_id))["operationState"] in TERMINAL_STATES and o,
            timeout=timeout,
            interval=0.2,
            what=f"op-occ {occ_id} to finish",
        )

    def run_op(self, inst_id: str, task: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.wait_op(self.start_op(inst_id, task, body))


def terminate_and_delete(tacker: TackerClient, inst: str) -> None:
    """Best effort at teardown: TERMINATE if instantiated, then DELETE."""
    with contextlib.suppress(AssertionError):
        if tacker.show(inst).get("instantiationState") == "INSTANTIATED":
            tacker.run_op(inst, "terminate", {"terminationType": "FORCEFUL"})
    with contextlib.suppress(AssertionError):
        tacker.delete(inst)


def instantiate_request(
    vim_connection_info: dict[str, Any],
    params: dict[str, Any],
    network_id: str,
    *,
    flavour: str = "simple",
) -> dict[str, Any]:
    """The body of an INSTANTIATE of the sample package: ``flavour`` on the VIM of
    ``vim_connection_info``, its external links on ``network_id``, ``params`` as the
    additionalParams."""
    return {
        "flavourId": flavour,
        "vimConnectionInfo": vim_connection_info,
        "extVirtualLinks": ext_virtual_links(network_id),
        "additionalParams": params,
    }


def ext_virtual_links(network_id: str) -> list[dict[str, Any]]:
    """The external links of the sample package: masterNode_CP1 and workerNode_CP2."""

    def link(vl_id: str, cpd: str) -> dict[str, Any]:
        proto = {
            "layerProtocol": "IP_OVER_ETHERNET",
            "ipOverEthernet": {"ipAddresses": [{"type": "IPV4", "numDynamicAddresses": 1}]},
        }
        return {
            "id": vl_id,
            "resourceId": network_id,
            "extCps": [{"cpdId": cpd, "cpConfig": {f"{cpd}_1": {"cpProtocolData": [proto]}}}],
        }

    return [link("net0_master", "masterNode_CP1"), link("net0_worker", "workerNode_CP2")]


class CallbackRecorder:
    """A tiny notification endpoint: GET -> 204, POST -> record the JSON body, 204.

    It sees exactly what Tacker sent (each send once), which is the reference the
    tests hold ``lccn-subscriber serve``'s store against.
    """

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.gets = 0
        self._cond = threading.Condition()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with recorder._cond:
                    recorder.gets += 1
                self.send_response(204)
                self.end_headers()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with recorder._cond:
                    recorder.received.append({"headers": dict(self.headers), "body": body})
                    recorder._cond.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="callback-recorder", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/notification"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def bodies(self, **match: Any) -> list[dict[str, Any]]:
        with self._cond:
            return [
                r["body"]
                for r in self.received
                if all(r["body"].get(k) == v for k, v in match.items())
            ]

    def wait(self, timeout: float = 60.0, **match: Any) -> dict[str, Any]:
        """The first notification whose fields equal ``match``; waits for it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for r in self.received:
                    if all(r["body"].get(k) == v for k, v in match.items()):
                        return r["body"]  # type: ignore[no-any-return]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no notification matching {match} in {timeout} s")
                self._cond.wait(left)


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
