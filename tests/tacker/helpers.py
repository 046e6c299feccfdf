"""Helpers of the ``tacker`` tier: a Tacker v2 client, a callback recorder, ``serve`` as a process.

All synchronous: Tacker, the simulator and ``serve`` are separate processes, and the
tests drive them over HTTP from one thread (no event loop shared across a session).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.testbed import tacker_bed

REPO = Path(__file__).resolve().parents[2]

__all__ = [
    "CallbackRecorder",
    "ServeProcess",
    "TackerClient",
    "ext_virtual_links",
    "k8s_params",
    "unique_name",
    "wait_for",
]

# Seconds each DELETE after TERMINATE waited on 409 (Tacker's lock outlives COMPLETED).
LOCK_WAITS: list[float] = []
TERMINAL_STATES = {"COMPLETED", "FAILED_TEMP", "FAILED", "ROLLED_BACK"}


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
    """The v2 VNF LCM calls the tests need, against one test bed."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, dict, Any]:
        return tacker_bed.request(method, f"{self.url}{path}", body, **kw)

    def _ok(self, expected: int, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, headers, resp = self.call(method, path, body, **kw)
        assert status == expected, f"{method} {path}: {status} {resp}"
        return headers, resp

    def subscribe(self, callback_uri: str) -> str:
        _, body = self._ok(201, "POST", "/vnflcm/v2/subscriptions", {"callbackUri": callback_uri})
        return str(body["id"])

    def unsubscribe(self, sub_id: str) -> None:
        self.call("DELETE", f"/vnflcm/v2/subscriptions/{sub_id}")

    def create(self, vnfd_id: str, name: str) -> str:
        _, body = self._ok(
            201, "POST", "/vnflcm/v2/vnf_instances", {"vnfdId": vnfd_id, "vnfInstanceName": name}
        )
        return str(body["id"])

    def delete(self, inst_id: str, timeout: float = 30.0) -> None:
        """DELETE the instance, retrying 409: Tacker still holds the instance's lock for a
        moment after the last op-occ reads COMPLETED."""
        t0 = time.monotonic()
        conflicts = 0

        def attempt() -> bool:
            nonlocal conflicts
            status, _, body = self.call("DELETE", f"/vnflcm/v2/vnf_instances/{inst_id}")
            assert status in (204, 409), f"DELETE {inst_id}: {status} {body}"
            conflicts += status == 409
            return status == 204

        wait_for(attempt, timeout=timeout, interval=0.2, what=f"DELETE {inst_id}")
        LOCK_WAITS.append(time.monotonic() - t0 if conflicts else 0.0)

    def show(self, inst_id: str) -> dict[str, Any]:
        return self._ok(200, "GET", f"/vnflcm/v2/vnf_instances/{inst_id}")[1]  # type: ignore[no-any-return]

    def op_occ(self, occ_id: str) -> dict[str, Any]:
        return self._ok(200, "GET", f"/vnflcm/v2/vnf_lcm_op_occs/{occ_id}")[1]  # type: ignore[no-any-return]

    def op_occs(self) -> list[dict[str, Any]]:
        return self._ok(200, "GET", "/vnflcm/v2/vnf_lcm_op_occs")[1]  # type: ignore[no-any-return]

    def start_op(self, inst_id: str, task: str, body: dict[str, Any]) -> str:
        """POST an LCM task (instantiate, scale, heal, terminate); returns the op-occ id.

        Tacker still holds the instance lock for a moment after an op-occ reads
        COMPLETED (its last notification is sent from a thread under the lock),
        so a task started right after another gets 409 for up to ~0.3 s: retry
        those, briefly, as an operator's client would.
        """
        path = f"/vnflcm/v2/vnf_instances/{inst_id}/{task}"
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
            f"/vnflcm/v2/vnf_instances/{inst_id}",
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


def k8s_params(flavour: str) -> dict[str, Any]:
    """additionalParams in the v2 guide's shape (our service reads them, Tacker keeps them)."""
    return {
        "k8s_cluster_installation_param": {
            "master_node": {
                "vdu_id": "masterNode",
                "ssh_cp_name": "masterNode_CP1",
                "nic_cp_name": "masterNode_CP1",
                "username": "ubuntu",
                "password": "ubuntu",
                "cluster_cp_name": "vip_CP" if flavour == "complex" else "masterNode_CP1",
            },
            "worker_node": {
                "vdu_id": "workerNode",
                "ssh_cp_name": "workerNode_CP2",
                "nic_cp_name": "workerNode_CP2",
                "username": "ubuntu",
                "password": "ubuntu",
            },
        }
    }


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


class ServeProcess:
    """``lccn-subscriber serve`` as a subprocess on a free port with its own SQLite store.

    Arguments:
        tmp: its directory (store, log, config file).
        config: settings by section, written to ``tmp/serve.yaml`` and given with
            ``--config`` (the listen address and the store stay the flags'); the CLI
            commands run with :meth:`cli` read the same file. ``None``: no config file,
            the defaults.

    :meth:`kill` (SIGKILL) and :meth:`start` again make a restart on the same store
    and port (the callback Tacker knows stays valid); the log is appended to.
    """

    def __init__(self, tmp: Path, config: Mapping[str, Any] | None = None) -> None:
        self.recorded_before = 0  # the recorder's count when serve subscribed
        self.tmp = tmp
        self.port = tacker_bed.free_port()
        self.db = tmp / "lccn.db"
        self.db_url = f"sqlite+aiosqlite:///{self.db}"
        self.log = tmp / "serve.log"
        self.config_file: Path | None = None
        if config is not None:
            self.config_file = tmp / "serve.yaml"
            self.config_file.touch(mode=0o600)  # it may hold passwords
            self.config_file.write_text(
                yaml.safe_dump(json.loads(json.dumps(dict(config), default=str)))
            )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def callback_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/lccn/notifications"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/healthz"

    def _exe(self) -> list[str]:
        exe = Path(sys.executable).with_name("lccn-subscriber")
        return [str(exe)] if exe.exists() else [sys.executable, "-m", "subscriber.cli"]

    def _store_args(self) -> list[str]:
        config = ["--config", str(self.config_file)] if self.config_file else []
        return ["--database", self.db_url, *config]

    def start(self, timeout: float = 30.0) -> None:
        with self.log.open("ab") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [
                    *self._exe(),
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    *self._store_args(),
                ],
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            try:
                # Liveness: the callback itself may want credentials (generated ones when
                # serve subscribes itself).
                status, _, _ = tacker_bed.request("GET", self.health_url, timeout=2)
            except OSError:
                return False
            return status == 200

        wait_for(ready, timeout=timeout, what="lccn-subscriber serve to answer")

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``lccn-subscriber ARGS --database ... [--config ...]`` (a command that takes them)."""
        out = subprocess.run(
            [*self._exe(), *args, *self._store_args()],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        if check:
            assert out.returncode == 0, f"lccn-subscriber {' '.join(args)}: {out.stderr}"
        return out

    def events(self) -> list[dict[str, Any]]:
        """``lccn-subscriber events list --format json`` (the CLI contract, not the tables)."""
        out = self.cli("events", "list", "--format", "json", "--limit", "100000")
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    def event(self, event_id: int) -> dict[str, Any]:
        """``lccn-subscriber events show ID``: the event with its jobs and their steps."""
        return json.loads(self.cli("events", "show", str(event_id)).stdout)  # type: ignore[no-any-return]

    def rows(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        """A read of the store's tables (what the CLI does not show, e.g. the inventory)."""
        with contextlib.closing(sqlite3.connect(self.db, timeout=10)) as conn:
            return conn.execute(sql, args).fetchall()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush; what the store holds is what a crash leaves."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
