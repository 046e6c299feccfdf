"""A serve that uses no SSH, Tacker, OpenStack or Kafka, on SQLite, never loads their libraries.

Each of them costs megabytes of resident memory in every process of ``serve``
(asyncssh about 15, Alembic with Mako about 10, keystoneauth1 with requests about
7, cryptography about 7, asyncpg and aiokafka about 3 each); they are imported where
they are used. So are SQLAlchemy's ORM and asyncio extension (about 6) and its PostgreSQL
dialect (about 2), PostgreSQL only, and the cluster handlers with their steps and
YAML (about 2, when cluster handlers are on), and OpenTelemetry (the ``otel`` extra, only
with ``tracing.enabled``).
That they still work when used is the business of the ``ssh``, ``tacker`` and
``kafka`` tiers and of the PostgreSQL tests. On PostgreSQL the store runs the asyncpg
dialect on a plain engine, so even there the ORM and the asyncio extension stay out.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from subscriber.store.migrate import HEAD_REVISION
from tests import REPO
from tests.programs import ServeProcess, cli, program_env

# Module names; a submodule counts as its package.
UNUSED = (
    "asyncssh",
    "alembic",
    "mako",
    "keystoneauth1",
    "requests",
    "openstack",
    "aiokafka",
    "asyncpg",
    "cryptography",
    "sqlalchemy.orm",
    "sqlalchemy.ext.asyncio",
    "sqlalchemy.dialects.postgresql",
    "handlers.handler",
    "handlers.steps",
    "handlers.instantiate",
    "yaml",
    # The otel extra (installed in the test environment): loaded only with tracing on.
    "opentelemetry",
    "google.protobuf",
)


# What a store on PostgreSQL needs of that list: its driver and SQLAlchemy's dialect.
POSTGRESQL_NEEDS = ("asyncpg", "sqlalchemy.dialects.postgresql")


def _loaded(modules: set[str], unused: tuple[str, ...] = UNUSED) -> list[str]:
    return sorted(u for u in unused if any(m == u or m.startswith(u + ".") for m in modules))


_SERVICE = """
import asyncio, json, sys
from subscriber.config import DatabaseSettings, HttpSettings, Settings
from subscriber.service import Service

async def main() -> None:
    settings = Settings(
        database=DatabaseSettings(url=sys.argv[1]), http=HttpSettings(host="127.0.0.1", port=0)
    )
    async with Service(settings):
        pass

asyncio.run(main())
print(json.dumps(sorted(sys.modules)))
"""


def service_modules(url: str) -> set[str]:
    """The modules a Service on the store at ``url`` (migrated first) has loaded once it
    started and stopped, in a clean interpreter."""
    upgraded = cli("db", "upgrade", "--database", url, clean=True)
    assert upgraded.returncode == 0, upgraded.stderr
    out = subprocess.run(
        [sys.executable, "-c", _SERVICE, url],
        cwd=REPO,
        env=program_env(clean=True),
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_a_service_started_and_stopped_loads_none_of_them(tmp_path: Path) -> None:
    modules = service_modules(f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}")
    assert {"subscriber.service", "subscriber.tracing"} <= modules
    assert _loaded(modules) == []


@pytest.mark.postgres
def test_a_service_on_postgresql_loads_only_its_driver_and_dialect(pg_url: str) -> None:
    modules = service_modules(pg_url)
    assert {"subscriber.service", "asyncpg", "sqlalchemy.dialects.postgresql"} <= modules
    unused = tuple(u for u in UNUSED if u not in POSTGRESQL_NEEDS)
    assert _loaded(modules, unused) == []


async def test_serve_migrates_a_new_store_and_its_processes_load_none_of_them(
    tmp_path: Path,
) -> None:
    """``serve`` (ingest and its forked worker) on a new store, one notification handled:
    ``-X importtime`` names every module either process imports, on stderr (the
    ``db upgrade`` child that migrates the store runs without it)."""
    serve = ServeProcess(tmp_path, python=("-X", "importtime"), clean=True).start()
    try:
        await serve.handle_one()
    finally:
        assert serve.proc is not None
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.proc.wait(30) == 0, serve.log_text()[-4000:]
    assert serve.rows("SELECT version_num FROM alembic_version") == [(HEAD_REVISION,)]
    text = serve.log_text()
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert {"subscriber.service", "subscriber.dispatcher", "subscriber.tracing"} <= modules, text[
        -4000:
    ]
    assert _loaded(modules) == []
