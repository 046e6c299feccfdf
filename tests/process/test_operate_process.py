"""Operating a real ``serve`` process: replay with and without a server, and no secret leaks."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import aiohttp
import pytest

from tests.conftest import basic, fetch_token
from tests.factories import op_occ, uid
from tests.operate_handler import handler_env, runs
from tests.programs import ServeProcess, cli


@pytest.fixture
def serve(tmp_path: Path) -> Any:
    fault = tmp_path / "fault"
    fault.touch()
    runs_file = tmp_path / "runs.txt"
    runs_file.touch()
    proc = ServeProcess(
        tmp_path,
        env={
            **handler_env(fault, runs_file),
            "LCCN_DISPATCH__RESCAN_INTERVAL": "0.3",
            "LCCN_DISPATCH__REORDER_WINDOW": "0.05",
        },
    )
    yield proc
    proc.kill()


def _fault(serve: ServeProcess) -> Path:
    return Path(serve.env["LCCN_TEST_FAULT_FILE"])


async def _status(serve: ServeProcess, event_id: int, want: str, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while True:
            rows = serve.rows("SELECT status, replay_mode FROM events WHERE id = ?", event_id)
            if rows and rows[0] == (want, None):
                return
            await asyncio.sleep(0.05)


async def _post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> int:
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as r:
        return r.status


async def _fix_and_replay(serve: ServeProcess, event_id: int) -> CompletedProcess[str]:
    """Fix the node, replay the failed event with the CLI, and see the running serve finish it."""
    _fault(serve).unlink()
    out = cli("replay", str(event_id), "--yes", "--database", serve.database, env=serve.env)
    assert out.returncode == 0, out.stderr
    await _status(serve, event_id, "done")
    return out


def _event_id(serve: ServeProcess, op_occ_id: str) -> int:
    ((event_id,),) = serve.rows("SELECT id FROM events WHERE vnf_lcm_op_occ_id = ?", op_occ_id)
    return int(event_id)  # type: ignore[call-overload]


async def test_replay_is_picked_up_by_a_running_serve_and_by_the_next_one(
    serve: ServeProcess,
) -> None:
    serve.start()
    await serve.ready()
    pid = serve.proc.pid  # type: ignore[union-attr]
    first = op_occ(state="COMPLETED")
    assert await _post(serve.url, first) == 204
    event_id = _event_id(serve, first["vnfLcmOpOccId"])
    await _status(serve, event_id, "failed")

    # 1. A running server: the replay is written by the CLI, run by serve's rescan.
    await _fix_and_replay(serve, event_id)
    assert serve.proc is not None and serve.proc.pid == pid and serve.proc.poll() is None

    # 2. No server: the replay waits in the store; the next serve runs it.
    _fault(serve).touch()
    second = op_occ(state="COMPLETED")
    assert await _post(serve.url, second) == 204
    second_id = _event_id(serve, second["vnfLcmOpOccId"])
    await _status(serve, second_id, "failed")
    serve.kill(signal.SIGTERM)
    _fault(serve).unlink()
    out = cli(
        "replay",
        str(second_id),
        "--mode",
        "anew",
        "--yes",
        "--database",
        serve.database,
        env=serve.env,
    )
    assert out.returncode == 0, out.stderr
    assert serve.rows("SELECT status, replay_mode FROM events WHERE id = ?", second_id) == [
        ("pending", "anew")
    ]
    serve.start()
    await serve.ready()
    await _status(serve, second_id, "done")
    modes = serve.rows("SELECT mode, status FROM jobs WHERE event_id = ? ORDER BY id", second_id)
    assert modes == [("live", "failed"), ("anew", "done")]
    ran = [r for r in runs(Path(serve.env["LCCN_TEST_RUNS_FILE"])) if r[1] == second_id]
    assert [step for _, _, step, what, _ in ran if what == "start"] == [
        "discover",
        "install",
        "discover",
        "install",
        "token",
    ]


async def test_no_secret_reaches_a_log_line_or_the_database_files(
    serve: ServeProcess, tmp_path: Path
) -> None:
    basic_pw = f"basicPW-{uid()}"
    client_pw = f"clientPW-{uid()}"
    params_pw = f"paramsPW-{uid()}"
    access_token = f"vimTOKEN-{uid()}"
    step_secret = f"stepSECRET-{uid()}"
    wrong_pw = f"wrongPW-{uid()}"
    key_body = f"MIIEkeyMATERIAL{uid().replace('-', '')}"
    serve.env.update(
        {
            "LCCN_AUTH__BASIC__ENABLED": "true",
            "LCCN_AUTH__BASIC__USERNAME": "tacker",
            "LCCN_AUTH__BASIC__PASSWORD": basic_pw,
            "LCCN_AUTH__OAUTH2__ENABLED": "true",
            "LCCN_AUTH__OAUTH2__CLIENT_ID": "tacker-client",
            "LCCN_AUTH__OAUTH2__CLIENT_PASSWORD": client_pw,
            "LCCN_TEST_LEAK_SECRET": step_secret,
            "LCCN_LOG__LEVEL": "DEBUG",
        }
    )
    serve.start()
    await serve.ready()
    base = f"http://127.0.0.1:{serve.port}"
    async with aiohttp.ClientSession() as http:
        client = {"Authorization": basic("tacker-client", client_pw)}
        answer = await fetch_token(http, base, {"grant_type": "client_credentials"}, headers=client)
        assert answer.status == 200
        bearer = answer.body["access_token"]
        body = op_occ(state="COMPLETED")
        body["additionalParams"] = {
            "k8s_cluster_installation_param": {
                "master_node": {"username": "ubuntu", "password": params_pw},
                "private_registry_connection_info": [{"password": params_pw}],
                "ssh_private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\n"
                f"{key_body}\n-----END OPENSSH PRIVATE KEY-----",
            }
        }
        assert await _post(serve.url, body, {"Authorization": basic("tacker", basic_pw)}) == 204
        modify = op_occ(operation="MODIFY_INFO", state="COMPLETED")
        modify["changedInfo"]["vimConnectionInfo"]["k8s"]["accessInfo"] = {
            "bearer_token": access_token,
            "password": params_pw,
        }
        assert await _post(serve.url, modify, {"Authorization": f"Bearer {bearer}"}) == 204
        wrong = {"Authorization": basic("tacker", wrong_pw)}
        assert await _post(serve.url, op_occ(), wrong) == 401
        assert await _post(serve.url, op_occ(), {"Authorization": f"Bearer {wrong_pw}"}) == 401
    event_id = _event_id(serve, body["vnfLcmOpOccId"])
    await _status(serve, event_id, "failed")
    out = await _fix_and_replay(serve, event_id)
    shown = cli("failed", "show", str(event_id), "--database", serve.database, env=serve.env)
    config = cli("config", "show", env=serve.env)
    assert basic_pw not in config.stdout and client_pw not in config.stdout
    # The step output was kept (with its secret masked).
    assert "port 6443 is in use" in shown.stdout
    serve.kill(signal.SIGTERM)

    secrets = [basic_pw, client_pw, params_pw, access_token, step_secret, wrong_pw, bearer]
    secrets.append(key_body)
    texts = {"serve log": serve.log_text(), "failed show": shown.stdout, "replay": out.stdout}
    texts["replay stderr"] = out.stderr
    for name in ("lccn.db", "lccn.db-wal", "lccn.db-shm"):
        path = serve.db.parent / name
        if path.exists():
            texts[name] = path.read_bytes().decode("latin-1")
    assert "job failed" in texts["serve log"] and "authentication failed" in texts["serve log"]
    for line in texts["serve log"].splitlines():
        json.loads(line)  # one JSON object a line
    for where, text in texts.items():
        for secret in secrets:
            assert secret not in text, f"a secret leaked into {where}"
