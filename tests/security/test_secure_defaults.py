"""Secure by default: an unauthenticated callback is said out loud, and ``/metrics`` and
``/readyz`` are open only on a private listener.

The public-listener checks bind ``0.0.0.0`` inside a network namespace of their own
(``unshare --net``: only its loopback exists there), so nothing is exposed on this
machine's interfaces and every request goes to 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from subscriber.config import HttpSettings
from tests.conftest import free_port
from tests.factories import op_occ
from tests.testbed.tacker_api import wait_for
from tests.testbed.tacker_bed import request

REPO = Path(__file__).resolve().parents[2]


def _env(tmp: Path) -> dict[str, str]:
    """This environment without any ``LCCN_*`` setting: the defaults, the store under ``tmp``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LCCN_")}
    return {**env, "LCCN_HOME": str(tmp), "PYTHONPATH": str(REPO)}


def test_serve_without_callback_auth_warns_once_and_readyz_says_so(tmp_path: Path) -> None:
    """No configuration at all: serve starts as it always did (anyone's notification is
    taken), but says so, once in its log and in /readyz, and stays ready."""
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "subscriber.cli", "serve", "--port", str(port)],
            cwd=REPO,
            env=_env(tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    base = f"http://127.0.0.1:{port}"
    try:

        def ready() -> Any:
            assert proc.poll() is None, log.read_text()
            try:
                status, _, body = request("GET", f"{base}/readyz", timeout=2)
            except OSError:
                return None
            return body if status == 200 else None

        body = wait_for(ready, timeout=60, what="serve to be ready")
        assert body["checks"]["callback_auth"] == {"ok": True, "detail": "callback auth off"}
        status, _, _ = request("POST", f"{base}/lccn/notifications", op_occ())
        assert status == 204  # as today: the lab default takes notifications
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    records = [json.loads(line) for line in log.read_text().splitlines() if line[:1] == "{"]
    warnings = [r for r in records if "callback auth off" in r.get("msg", "")]
    assert len(warnings) == 1, warnings
    assert warnings[0]["level"] == "warning"


def test_a_public_listener_moves_the_probes_to_loopback() -> None:
    assert HttpSettings().probes_listener() is None  # loopback: one listener, as before
    assert HttpSettings(host="::1").probes_listener() is None
    assert HttpSettings(host="0.0.0.0").probes_listener() == ("127.0.0.1", 9765)
    assert HttpSettings(host="10.0.0.5", metrics_port=9100).probes_listener() == (
        "127.0.0.1",
        9100,
    )
    assert HttpSettings(metrics_host="0.0.0.0", metrics_port=0).probes_listener() == (
        "0.0.0.0",
        0,
    )
    with pytest.raises(ValueError, match="metrics listener"):
        HttpSettings(host="0.0.0.0", metrics_host="0.0.0.0", port=9000, metrics_port=9000)


# Runs inside the namespace: a Service on 0.0.0.0 with the default ports (nothing else
# listens there), then GETs of the probes on both listeners; prints {name: [status, detail]}.
_PROBE = """
import asyncio, base64, json, sys
import aiohttp
from pydantic import SecretStr
from subscriber.config import AuthSettings, BasicAuthSettings, DatabaseSettings, HttpSettings
from subscriber.config import Settings
from subscriber.service import Service

async def main(db: str, with_auth: bool) -> None:
    auth = AuthSettings()
    if with_auth:
        auth = AuthSettings(
            basic=BasicAuthSettings(enabled=True, username="tacker", password=SecretStr("pw"))
        )
    settings = Settings(
        http=HttpSettings(host="0.0.0.0"), database=DatabaseSettings(url=db), auth=auth
    )
    svc = Service(settings)
    await svc.start()
    creds = {"Authorization": "Basic " + base64.b64encode(b"tacker:pw").decode()}
    public, private = "http://127.0.0.1:8765", "http://127.0.0.1:9765"
    asks = {
        "public /metrics": (public + "/metrics", {}),
        "public /readyz": (public + "/readyz", {}),
        "public /metrics with credentials": (public + "/metrics", creds),
        "public /readyz with credentials": (public + "/readyz", creds),
        "public /healthz": (public + "/healthz", {}),
        "private /metrics": (private + "/metrics", {}),
        "private /readyz": (private + "/readyz", {}),
        "private /healthz": (private + "/healthz", {}),
        "private callback": (private + "/lccn/notifications", {}),
    }
    out = {}
    try:
        async with aiohttp.ClientSession() as http:
            for name, (url, headers) in asks.items():
                async with http.get(url, headers=headers) as resp:
                    text = await resp.text()
                    detail = json.loads(text) if resp.content_type.endswith("json") else ""
                    out[name] = [resp.status, detail]
    finally:
        await svc.stop()
    print(json.dumps(out))

asyncio.run(main(sys.argv[1], sys.argv[2] == "auth"))
"""


def _probe_in_private_netns(tmp: Path, with_auth: bool) -> dict[str, Any]:
    db = f"sqlite+aiosqlite:///{tmp / 'lccn.db'}"
    out = subprocess.run(
        [
            "unshare",
            "--net",
            "--",
            "sh",
            "-c",
            'ip link set lo up && exec "$0" "$@"',
            sys.executable,
            "-c",
            _PROBE,
            db,
            "auth" if with_auth else "none",
        ],
        cwd=REPO,
        env=_env(tmp),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


def test_metrics_and_readyz_on_a_public_listener_need_the_callback_credentials(
    tmp_path: Path,
) -> None:
    got = _probe_in_private_netns(tmp_path, with_auth=True)
    for name in ("public /metrics", "public /readyz"):
        status, problem = got[name]
        assert status == 401, got
        assert problem["status"] == 401 and "credentials" in problem["detail"]
    assert got["public /metrics with credentials"][0] == 200
    assert got["public /readyz with credentials"][0] == 200
    # Liveness says nothing about the service: open everywhere.
    assert got["public /healthz"][0] == 200
    assert got["private /metrics"][0] == 200
    assert got["private /readyz"][0] == 200
    assert got["private /healthz"][0] == 200
    assert got["private callback"][0] == 404  # the metrics listener takes no notification


def test_metrics_and_readyz_are_not_served_on_a_public_listener_without_callback_auth(
    tmp_path: Path,
) -> None:
    got = _probe_in_private_netns(tmp_path, with_auth=False)
    for name in ("public /metrics", "public /readyz"):
        assert got[name][0] == 404, got
        assert "metrics listener" in got[name][1]["detail"]
    assert got["private /metrics"][0] == 200
    status, ready = got["private /readyz"]
    assert status == 200
    assert ready["checks"]["callback_auth"] == {"ok": True, "detail": "callback auth off"}
