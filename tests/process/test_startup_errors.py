"""Every start-up and CLI failure is one clear line on stderr, with a documented exit code.

Each case runs ``lccn-subscriber`` as a subprocess and checks: the exit code
(3 configuration, 4 something needed is unreachable or refused us), exactly one
line on stderr, no ``Traceback``, no secret, and the words that say what to
check. The machine's PostgreSQL answers the wrong-credentials case; a
simulated Keystone (real HTTP) refuses Tacker's credentials.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from tests.backends import pg_database, pg_dsn
from tests.conftest import free_port
from tests.programs import NO_HOME, ServeProcess, cli
from tests.testbed.openstack_sim import OpenStackSim, SimConfig

SECRET = "S3cr3t-Passw0rd"


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """The CLI with a home that holds no configuration."""
    return cli(*args, env={"LCCN_HOME": str(NO_HOME), **(env or {})}, timeout=timeout)


def one_line(out: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == code, (out.returncode, out.stderr)
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr and SECRET not in out.stderr + out.stdout
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


DOWN = f"postgresql+asyncpg://lccn:{SECRET}@127.0.0.1:{free_port()}/lccn"


@pytest.mark.parametrize(
    "command",
    [
        ("serve", "--port", "0"),
        ("db", "upgrade"),
        ("events", "list"),
        ("failed", "list"),
        ("audit", "list"),
        ("replay", "1", "--dry-run"),
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_store_unreachable(command: tuple[str, ...]) -> None:
    line = one_line(
        run(*command, "--database", DOWN), 4, "cannot open the store", "connection refused"
    )
    assert "lccn:***@127.0.0.1" in line  # the URL, password masked


@pytest.mark.postgres
def test_store_refuses_the_credentials() -> None:
    url = f"postgresql+asyncpg://no_such_role_lccn:{SECRET}@127.0.0.1:5432/test"
    one_line(
        run("events", "list", "--database", url), 4, "cannot open the store", "no_such_role_lccn"
    )


def test_store_migrated_by_a_newer_version(tmp_path: Path) -> None:
    db = tmp_path / "lccn.db"
    url = f"sqlite+aiosqlite:///{db}"
    assert run("db", "upgrade", "--database", url).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    line = one_line(run("serve", "--port", "0", "--database", url), 3, "newer lccn-subscriber")
    assert "9999_from_the_future" in line


def test_port_taken_and_address_not_ours(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        one_line(
            run("serve", "--port", port, "--database", url),
            4,
            f"127.0.0.1:{port}",
            "address already in use",
        )
    # Binding sends nothing anywhere: 192.0.2.0/24 is no address of this machine.
    one_line(
        run("serve", "--host", "192.0.2.55", "--port", "0", "--database", url),
        4,
        "cannot assign requested address",
    )


def test_unusable_tls_files(tmp_path: Path) -> None:
    for name in ("ca.crt", "server.crt", "server.key"):
        (tmp_path / name).write_text("not a certificate\n")
    env = {
        "LCCN_AUTH__MTLS__ENABLED": "true",
        "LCCN_AUTH__MTLS__CA_FILE": str(tmp_path / "ca.crt"),
        "LCCN_AUTH__MTLS__CERT_FILE": str(tmp_path / "server.crt"),
        "LCCN_AUTH__MTLS__KEY_FILE": str(tmp_path / "server.key"),
    }
    url = f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"
    one_line(run("serve", "--port", "0", "--database", url, env=env), 3, "auth.mtls.ca_file")
    env["LCCN_AUTH__MTLS__CA_FILE"] = str(tmp_path / "missing.crt")
    one_line(run("serve", "--port", "0", "--database", url, env=env), 3, "missing.crt")


@pytest.mark.parametrize(
    ("setting", "value", "words"),
    [
        ("SSH__CLIENT_KEYS", "{tmp}/id_missing", ("ssh.client_keys", "id_missing: no such file")),
        ("SSH__KNOWN_HOSTS", "{tmp}/kh", ("ssh.known_hosts", "strict")),
        (
            "HANDLERS__MODULES",
            "no_such_handlers_mod",
            ("handler module 'no_such_handlers_mod' cannot be imported",),
        ),
    ],
    ids=["client_keys", "known_hosts", "handler_modules"],
)
def test_ssh_files_and_handler_modules(
    tmp_path: Path, setting: str, value: str, words: tuple[str, ...]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"
    env = {f"LCCN_{setting}": value.format(tmp=tmp_path)}
    one_line(run("serve", "--port", "0", "--database", url, env=env), 3, *words)


def test_settings_in_the_environment() -> None:
    # A plain name where a list is expected is a list of one.
    shown = run("config", "show", env={"LCCN_HANDLERS__MODULES": "tests.crash_handler"})
    assert shown.returncode == 0 and '"tests.crash_handler"' in shown.stdout
    one_line(run("config", "show", env={"LCCN_HTTP__PORT": "abc"}), 3, "http.port")
    one_line(run("config", "show", env={"LCCN_AUTH__BASIC": "{not json"}), 3, "auth", "JSON")


def test_debug_shows_the_traceback() -> None:
    out = run("--debug", "events", "list", "--database", DOWN)
    assert out.returncode == 4 and "Traceback" in out.stderr and SECRET not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("lccn-subscriber: error: cannot open")


def _serve(tmp_path: Path, database: str, env: dict[str, str]) -> ServeProcess:
    """``serve`` as a subprocess logging (text) to a file."""
    args = ("--log-format", "text")
    return ServeProcess(tmp_path, env=env, database=database, args=args).start()


def _stopped_within(serve: ServeProcess, seconds: float) -> int:
    """SIGTERM, then the exit code; fails with serve's log if it outlives ``seconds``."""
    proc, log = serve.proc, serve.log
    assert proc is not None
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(
            f"serve still ran {seconds} s after SIGTERM; its log:\n{log.read_text()[-4000:]}"
        )


async def test_kafka_down_at_start_serve_runs_and_is_not_ready(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"
    kafka = {"LCCN_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}"}
    serve = _serve(tmp_path, url, kafka)
    try:
        async with aiohttp.ClientSession() as http, asyncio.timeout(60):
            while True:
                assert serve.alive(), "serve exited although only Kafka is down"
                try:
                    status, body = await serve.readyz(http)
                    if status == 503 and "kafka" in str(body):
                        break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)
    finally:
        assert _stopped_within(serve, 30) == 0
    status = await asyncio.to_thread(
        run, "kafka", "status", env={"LCCN_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}"}
    )
    one_line(status, 4, "no Kafka broker answered")


@pytest.mark.postgres
async def test_sigterm_while_starting_abandons_the_start(tmp_path: Path) -> None:
    """A supervisor's SIGTERM is obeyed while the start waits (here: the migration waits on a
    lock another session holds), not only once the start is done."""
    async with pg_database() as url:
        assert run("db", "upgrade", "--database", url).returncode == 0
        dsn = pg_dsn(url)
        holder, watcher = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
        try:
            tx = holder.transaction()
            await tx.start()
            await holder.execute("LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE")
            # The store's lock_timeout would end the wait only after a minute.
            serve = _serve(tmp_path, url, {"LCCN_DATABASE__LOCK_TIMEOUT": "60"})
            async with asyncio.timeout(60):
                # Another session: pg_stat_activity is a snapshot per transaction.
                while not await watcher.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%alembic_version%' AND datname = current_database()"
                ):
                    assert serve.alive(), serve.log_text()
                    await asyncio.sleep(0.1)
            began = time.monotonic()
            assert _stopped_within(serve, 20) == 0
            assert time.monotonic() - began < 10
            assert "the start is abandoned" in serve.log_text()
            await tx.rollback()
        finally:
            await holder.close()
            await watcher.close()


@pytest.fixture
async def keystone() -> AsyncIterator[OpenStackSim]:
    async with OpenStackSim(SimConfig()) as sim:
        yield sim


async def test_tacker_unreachable_or_keystone_refusing(keystone: OpenStackSim) -> None:
    down = {
        "LCCN_TACKER__ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "LCCN_TACKER__RETRY_ATTEMPTS": "1",
    }
    out = await asyncio.to_thread(run, "subscriptions", "list", env=down)
    one_line(out, 4, "cannot connect to 127.0.0.1", "connection refused")
    c = keystone.config
    refused = {
        "LCCN_TACKER__AUTH_TYPE": "password",
        "LCCN_TACKER__AUTH_URL": keystone.auth_url,
        "LCCN_TACKER__USERNAME": c.username,
        "LCCN_TACKER__PASSWORD": SECRET,
        "LCCN_TACKER__PROJECT_NAME": c.project_name,
        "LCCN_TACKER__CALLBACK_URI": "http://127.0.0.1:9/lccn/notifications",
    }
    started = time.monotonic()
    out = await asyncio.to_thread(run, "subscribe", env=refused)
    one_line(out, 4, "Keystone refused the credentials")
    assert time.monotonic() - started < 60
    out = await asyncio.to_thread(run, "subscriptions", "list")
    one_line(out, 3, "no Tacker configured")
