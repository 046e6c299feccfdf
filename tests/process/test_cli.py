"""The command line: events list/show, db upgrade, config show, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from subscriber.store.migrate import HEAD_REVISION
from tests.conftest import ServiceFactory, callback_url, wait_settled
from tests.factories import op_occ
from tests.programs import cli


@pytest.mark.asyncio
async def test_events_list_json_and_show(
    start_service: ServiceFactory, http: aiohttp.ClientSession, db_url: str
) -> None:
    svc = await start_service()
    body = op_occ(state="COMPLETED")
    body["additionalParams"] = {"master_node": {"password": "top-secret-pw"}}
    async with http.post(callback_url(svc), json=body) as resp:
        assert resp.status == 204
    (event,) = await wait_settled(svc, 1)

    out = cli("events", "list", "--format", "json", "--database", db_url)
    assert out.returncode == 0, out.stderr
    (item,) = json.loads(out.stdout)
    assert {
        k: item[k]
        for k in (
            "id",
            "source",
            "vnfInstanceId",
            "vnfLcmOpOccId",
            "operation",
            "operationState",
            "notificationStatus",
            "status",
        )
    } == {
        "id": event.id,
        "source": "http",
        "vnfInstanceId": body["vnfInstanceId"],
        "vnfLcmOpOccId": body["vnfLcmOpOccId"],
        "operation": "INSTANTIATE",
        "operationState": "COMPLETED",
        "notificationStatus": "RESULT",
        "status": "done",
    }

    filtered = cli("events", "list", "--format", "json", "--status", "failed", "--database", db_url)
    assert json.loads(filtered.stdout) == []
    by_instance = cli("events", "list", "--instance", body["vnfInstanceId"], "--database", db_url)
    assert body["vnfInstanceId"] in by_instance.stdout and "done" in by_instance.stdout

    shown = cli("events", "show", str(event.id), "--database", db_url)
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert detail["jobs"][0]["handler"] == "log"
    assert detail["jobs"][0]["steps"][0]["status"] == "done"
    assert detail["body"]["additionalParams"]["master_node"]["password"] == "***"
    assert "top-secret-pw" not in shown.stdout


def test_events_show_unknown_id_is_one_line_error(db_url: str) -> None:
    out = cli("events", "show", "999", "--database", db_url)
    assert out.returncode == 2
    assert out.stderr.strip() == "lccn-subscriber: error: no event with id 999"


def test_db_upgrade_creates_and_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'new' / 'x.db'}"
    for _ in range(2):
        out = cli("db", "upgrade", "--database", url)
        assert out.returncode == 0, out.stderr
        assert f"revision {HEAD_REVISION}" in out.stdout
    assert (tmp_path / "new" / "x.db").exists()


def test_default_database_lives_under_lccn_home(tmp_path: Path) -> None:
    out = cli("db", "upgrade", env={"LCCN_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "lccn.db").exists()


def test_config_show_merges_file_env_flags_and_masks_secrets(tmp_path: Path) -> None:
    cfg = tmp_path / "lccn.yaml"
    cfg.write_text(
        "http:\n  port: 9000\n  path: /cb\n"
        "database:\n  url: postgresql+asyncpg://lccn:hunter2pw@db.example/lccn\n"
        "dispatch:\n  max_parallel_lanes: 4\n"
    )
    out = cli("config", "show", "--config", str(cfg), env={"LCCN_HTTP__PORT": "9100"})
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["http"]["port"] == 9100  # env wins over the file
    assert data["http"]["path"] == "/cb"
    assert data["dispatch"]["max_parallel_lanes"] == 4
    assert "hunter2pw" not in out.stdout
    assert data["database"]["url"] == "postgresql+asyncpg://lccn:***@db.example/lccn"


def test_toml_config_is_read(tmp_path: Path) -> None:
    cfg = tmp_path / "lccn.toml"
    cfg.write_text("[http]\nport = 9200\n")
    data = json.loads(cli("config", "show", "--config", str(cfg)).stdout)
    assert data["http"]["port"] == 9200


@pytest.mark.parametrize(
    ("content", "env", "message"),
    [
        ("http:\n  port: seventy\n", {}, "configuration error: http.port:"),
        ("htp:\n  port: 1\n", {}, "configuration error: htp:"),
        ("", {"LCCN_DISPATCH__MAX_PARALLEL_LANES": "0"}, "dispatch.max_parallel_lanes"),
    ],
)
def test_bad_config_is_a_one_line_error(
    tmp_path: Path, content: str, env: dict[str, str], message: str
) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(content)
    out = cli("config", "show", "--config", str(cfg), env=env)
    assert out.returncode == 3  # a configuration error
    assert len(out.stderr.strip().splitlines()) == 1
    assert message in out.stderr


def test_missing_config_file_is_a_one_line_error(tmp_path: Path) -> None:
    out = cli("serve", "--config", str(tmp_path / "nope.yaml"))
    assert out.returncode == 3
    assert (
        out.stderr.strip()
        == f"lccn-subscriber: configuration error: config file not found: {tmp_path / 'nope.yaml'}"
    )


def test_handlers_list_prints_the_routing_table() -> None:
    shown = cli("handlers", "list", "--format", "json", env={"LCCN_CLUSTER__HANDLERS": "on"})
    assert shown.returncode == 0, shown.stderr
    rows = {(r["operation"], r["state"]): r for r in json.loads(shown.stdout)}
    assert rows[("INSTANTIATE", "COMPLETED")]["handler"] == "cluster-instantiate"
    assert rows[("SCALE", "COMPLETED")]["handler"] == "cluster-scale"
    assert rows[("HEAL", "COMPLETED")]["handler"] == "cluster-heal"
    assert rows[("HEAL", "STARTING")]["steps"] == ["confirm", "validate-params"]
    assert rows[("*", "*")]["handler"] == "log"
    heal = rows[("HEAL", "COMPLETED")]["steps"]
    assert heal[:4] == ["confirm", "load-params", "discover", "retire-nodes"]
    assert "join-master-<node>" in heal and heal[-1] == "reconcile-membership"
    # Without Tacker and OpenStack configured (auto), only the log handler routes.
    plain = cli("handlers", "list", "--format", "json")
    assert [r["handler"] for r in json.loads(plain.stdout)] == ["log"]
    text = cli("handlers", "list", env={"LCCN_CLUSTER__HANDLERS": "on"}).stdout
    assert text.splitlines()[0].split() == ["operation", "state", "handler", "steps"]
    bad = cli("handlers", "list", env={"LCCN_HANDLERS__MODULES": '["no_such_module"]'})
    assert bad.returncode == 3 and "Traceback" not in bad.stderr
    assert "no_such_module" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_handlers_on_without_tacker_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    run = cli("serve", "--port", "0", "--database", db, env={"LCCN_CLUSTER__HANDLERS": "on"})
    assert run.returncode == 3, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr
    assert "cluster.handlers is on" in lines[0] and "tacker" in lines[0]


@pytest.mark.asyncio
async def test_serve_says_at_start_what_it_handles(
    start_service: ServiceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="subscriber.service")
    await start_service()
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("handling")]
    assert line == (
        "handling no operation; every other transition is only recorded (log handler); "
        "cluster handlers off: openstack and tacker not configured"
    )


def test_routing_line_names_every_handled_operation() -> None:
    from handlers import default_routing
    from subscriber.config import Settings
    from subscriber.service import _routing_summary

    line = _routing_summary(default_routing(cluster_handlers=True), Settings(), [])
    assert line == (
        "handling HEAL (COMPLETED, PROCESSING, STARTING); "
        "INSTANTIATE (COMPLETED, ROLLING_BACK, STARTING); "
        "SCALE (COMPLETED, PROCESSING, ROLLING_BACK, STARTING); TERMINATE (COMPLETED); "
        "every other transition is only recorded (log handler)"
    )
