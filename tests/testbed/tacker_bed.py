#!/usr/bin/env python3
"""Start and stop a real OpenStack Tacker 16.0.0 (conductor + API server) for tests and demo.

    python3 -m tests.testbed.tacker_bed start --state-file bed.json [--onboard]   # prints the state
    python3 -m tests.testbed.tacker_bed stop  --state-file bed.json

(from the repository root; ``python3 tests/testbed/tacker_bed.py ...`` works too)

``start`` needs the cached install of ``scripts/setup.d/20-tacker.sh``, the local
PostgreSQL (127.0.0.1:5432, user postgres, trust) and RabbitMQ (guest/guest). It makes
a fresh database and a work directory (tacker.conf, api-paste.ini, logs, CSAR store),
runs the migrations, starts ``tacker-conductor`` and ``tacker-server`` on a free port
and waits until the v2 API answers. ``--onboard`` then builds and onboards the sample
VNF package. ``stop`` kills both by PID (SIGTERM, SIGKILL after a grace period: Tacker
ignores SIGTERM for a while), drops the database and removes the work directory.

Tacker's Kubernetes VIM driver keeps each VIM's Fernet key in Barbican (``[k8s_vim]
use_barbican``; without it it refuses the VIM), reached as the service user of
``[keystone_authtoken]``. So the bed starts a simulated Keystone and Barbican of its own
(``tests.testbed.openstack_sim``, pids key ``openstack-sim``) and points that section at
it; ``BedState.keystone_url`` is its Keystone (``sim_control_url`` its ``/_sim`` root).

Each bed gets its own oslo.messaging exchange, so two beds on one RabbitMQ do not
answer each other's RPC calls.

Tacker runs with ``auth_strategy = noauth``. Its v1 package-management and v1 VNF LCM
APIs then lack a request context (upload -> 500 ``KeyError: 'tacker.context'``), so the
api-paste copy adds ``keystonecontext`` to those pipelines; requests carry ``X-User-Id``,
``X-Project-Id`` (32 hex digits) and ``X-Roles: admin``, see :data:`HEADERS`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.testbed.masked import masked
from tests.testbed.openstack_sim.process import SimProcess

TACKER_VERSION = "16.0.0"
# The sample VNF package and its builder are user-facing: they stay in scripts/.
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
# On the Tacker processes' PYTHONPATH: the SQLAlchemy plugin their database URL names.
PG_PLUGIN = Path(__file__).resolve().parent / "tacker_pg"
_REPO = Path(__file__).resolve().parents[2]
PROJECT_ID = "6b1e4f3c2a9d4e8f9a7b6c5d4e3f2a1b"
USER_ID = "2f9a7c1e5b3d4a6c8e0f1a2b3c4d5e6f"
#: the Tacker client's retries and polls, quick for tests
QUICK_RETRIES = {"retry_attempts": 20, "retry_initial": 0.1, "retry_max": 1.0}
HEADERS = {
    "X-User-Id": USER_ID,
    "X-Project-Id": PROJECT_ID,
    "X-Roles": "admin",
    "Version": "2.0.0",
}


def tacker_home() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    default = cache / "lccn-subscriber" / f"tacker-{TACKER_VERSION}"
    return Path(os.environ.get("LCCN_TACKER_HOME", default))


def tacker_venv() -> Path:
    return tacker_home() / "venv"


#: Tacker's own v1 Kubernetes management driver ("K1"), as scripts/setup.d/22-tacker-k1.sh
#: registers it in Tacker's venv (entry point group ``tacker.tacker.mgmt.drivers``)
K1_DRIVER = "mgmt-drivers-kubernetes"


def k1_installed() -> bool:
    """Whether Tacker's venv holds the ``lccn-tacker-k1`` wheel of ``22-tacker-k1.sh``."""
    return any(
        tacker_venv().glob("lib/python3*/site-packages/lccn_tacker_k1-*.dist-info/entry_points.txt")
    )


def is_installed() -> bool:
    return (tacker_home() / "installed.stamp").is_file() and (
        tacker_venv() / "bin" / "tacker-server"
    ).exists()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BedError(RuntimeError):
    """The bed could not be started (with the log tail that says why)."""


@dataclass
class BedState:
    """Everything ``stop`` needs; also what tests and the demo read."""

    port: int
    database: str
    workdir: str
    pids: dict[str, int] = field(default_factory=dict)
    vnf_package_id: str | None = None
    vnfd_id: str | None = None
    started_in: float = 0.0
    watchdog_pid: int | None = None
    vhost: str = ""  # the bed's own RabbitMQ vhost ("" = the default one)
    keystone_url: str = ""  # the bed's Keystone (and Barbican), for [keystone_authtoken]
    sim_url: str = ""  # that simulator's root (its /_sim control API)
    k1: bool = False  # a bed of its own for Tacker's v1 Kubernetes driver (see start())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tacker_section(self, **settings: Any) -> dict[str, Any]:
        """The ``tacker`` section of a ``serve`` that talks to this bed, with ``settings``."""
        return {
            "endpoint": self.url,
            "noauth_user_id": USER_ID,
            "noauth_project_id": PROJECT_ID,
            **settings,
        }

    @property
    def hook_config(self) -> Path:
        """The drain hook's configuration file the conductor's scripts read (absent: the
        hook does nothing); a test writes it to point the hook at its ``serve``."""
        return Path(self.workdir) / "lccn_hook.json"


def request(
    method: str,
    url: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
    timeout: float = 30.0,
) -> tuple[int, dict[str, str], Any]:
    """One HTTP call to Tacker with the noauth headers; returns (status, headers, json)."""
    hdrs = dict(HEADERS)
    if body is not None:
        data = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    hdrs.update(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, rh, raw = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        status, rh, raw = exc.code, dict(exc.headers), exc.read()
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode(errors="replace")
    return status, rh, parsed


def _psql_python(sql: str, dbname: str = "postgres", *args: str) -> None:
    """Run SQL (with ``%s`` parameters ``args``) on a database with the Tacker venv's
    psycopg2 (autocommit); the maintenance database by default."""
    code = (
        "import psycopg2, sys\n"
        "c = psycopg2.connect(host='127.0.0.1', port=5432, user='postgres', dbname=sys.argv[2])\n"
        "c.autocommit = True\n"
        "c.cursor().execute(sys.argv[1], tuple(sys.argv[3:]) or None)\n"
    )
    subprocess.run(
        [str(tacker_venv() / "bin" / "python"), "-c", code, sql, dbname, *args],
        check=True,
        capture_output=True,
        timeout=60,
    )


# Tacker 16.0.0's v1 API on PostgreSQL (it is tested on MySQL) fails at its first op-occ
# and its first notification: its migrations make two columns smallint that its model
# writes booleans into ("column is_automatic_invocation is of type smallint but
# expression is of type boolean"), and the subscription query behind every v1
# notification calls MySQL's JSON_CONTAINS. The bed's database gets the column type the
# model writes and a JSON_CONTAINS of its own (MySQL's meaning: the candidate JSON is
# contained in the target); Tacker itself is not changed. Likewise a Kubernetes VIM with
# a bearer token has no password: the model says ``vimauths.password`` is nullable "in
# the actual database" (MySQL: the migration that widened it with MODIFY dropped NOT
# NULL), while on PostgreSQL the column keeps the NOT NULL it was created with.
_V1_SCHEMA = (
    "ALTER TABLE vimauths ALTER COLUMN password DROP NOT NULL",
    "ALTER TABLE vnf_lcm_op_occs"
    " ALTER COLUMN is_automatic_invocation DROP DEFAULT,"
    " ALTER COLUMN is_automatic_invocation TYPE boolean USING is_automatic_invocation <> 0,"
    " ALTER COLUMN is_cancel_pending DROP DEFAULT,"
    " ALTER COLUMN is_cancel_pending TYPE boolean USING is_cancel_pending <> 0",
    "CREATE FUNCTION json_contains(target text, candidate text) RETURNS boolean"
    " LANGUAGE sql IMMUTABLE AS"
    " $$ SELECT coalesce(nullif(target, ''), 'null')::jsonb @> candidate::jsonb $$",
    "CREATE FUNCTION json_contains(target json, candidate text) RETURNS boolean"
    " LANGUAGE sql IMMUTABLE AS $$ SELECT target::jsonb @> candidate::jsonb $$",
)


def _fit_v1_schema(database: str) -> None:
    for statement in _V1_SCHEMA:
        _psql_python(statement, database)


def _stored_value(state: BedState, query: str, key: str) -> Any:
    """The first column of the row ``query`` (one ``%s``: ``key``) finds in Tacker's database,
    read with the Tacker venv's psycopg2; ``None`` when there is no row."""
    code = (
        "import json, psycopg2, sys\n"
        "c = psycopg2.connect(host='127.0.0.1', port=5432, user='postgres', dbname=sys.argv[1])\n"
        "cur = c.cursor()\n"
        "cur.execute(sys.argv[2], (sys.argv[3],))\n"
        "row = cur.fetchone()\n"
        "value = row[0] if row else None\n"
        "print(value if isinstance(value, str) else json.dumps(value))\n"
    )
    out = subprocess.run(
        [str(tacker_venv() / "bin" / "python"), "-c", code, state.database, query, key],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return json.loads(out.stdout)


def stored_vim_connection_info(state: BedState, inst_id: str) -> dict[str, Any] | None:
    """A v2 instance's ``vimConnectionInfo`` as Tacker stored it (its ``VnfInstanceV2`` row).

    The API hides credentials (``GET vnf_instances/{id}`` drops ``accessInfo.bearer_token``,
    ``password``, ``client_secret``); the stored entry is what Tacker's infra drivers
    use. Read with the Tacker venv's psycopg2; ``None`` for an unknown instance. The
    credentials are :class:`~tests.testbed.masked.Secret`: no failure report shows them.
    """
    value = _stored_value(
        state, 'SELECT "vimConnectionInfo" FROM "VnfInstanceV2" WHERE id = %s', inst_id
    )
    return masked(value) if isinstance(value, dict) else None


def stored_subscription_authentication(
    state: BedState, sub_id: str, api: str = "v2"
) -> dict[str, Any] | None:
    """The ``authentication`` Tacker stored with a subscription (the API never shows it):
    what Tacker presents to the callback. ``None`` for an unknown subscription or none."""
    table, column = (
        ('"LccnSubscriptionV2"', "id") if api == "v2" else ("vnf_lcm_subscriptions", "id")
    )
    value = _stored_value(state, f"SELECT authentication FROM {table} WHERE {column} = %s", sub_id)
    if isinstance(value, str):  # v1 keeps the JSON text
        value = json.loads(value)
    return value if isinstance(value, dict) else None


def _write_config(state: BedState) -> Path:
    work = Path(state.workdir)
    for sub in ("csar", "images", "locks", "state", "logs", "vim_keys"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    paste = (tacker_venv() / "etc" / "tacker" / "api-paste.ini").read_text()
    # The v1 package and v1 LCM APIs need the request context the noauth headers give.
    for app in ("vnfpkgmapp_v1", "vnflcmaapp_v1"):
        old = f"noauth = request_id catch_errors {app}"
        if old not in paste:
            raise BedError(f"unexpected api-paste.ini: the {app} noauth pipeline not found")
        paste = paste.replace(old, f"noauth = request_id catch_errors keystonecontext {app}")
    # Tacker reaches Barbican as [keystone_authtoken]'s service user; the server knows that
    # user's options (password ...) only once an authtoken filter has loaded the auth
    # plugin, which the keystone pipelines do and noauth never does. One route nobody
    # calls carries the filter, so that it is loaded (urlmap loads every app at start).
    route = "/v1.0: tackerapi_v1_0\n"
    if route not in paste:
        raise BedError("unexpected api-paste.ini: the /v1.0 route not found")
    paste = paste.replace(route, route + "/lccn-bed-authtoken: lccn_bed_authtoken\n", 1)
    paste += "\n[pipeline:lccn_bed_authtoken]\npipeline = authtoken tackerversions\n"
    (work / "api-paste.ini").write_text(paste)
    exchange = f"tacker_bed_{state.database}"
    # Imported here: the watchdog runs this file as a script, without the package.
    from tests.testbed.openstack_sim.app import SimConfig

    sim = SimConfig()
    # v1 management drivers: Tacker's no-op (what a VNFD naming none gets) and, on a K1
    # bed only (start(k1=True)), Tacker's own Kubernetes driver K1, which only a VNFD
    # naming ``mgmt-drivers-kubernetes`` gets (tests/testbed/tacker_driver_v1.py).
    mgmt_drivers = ",".join(["vnflcm_noop", *([K1_DRIVER] if state.k1 else [])])
    conf = f"""[DEFAULT]
auth_strategy = noauth
bind_host = 127.0.0.1
bind_port = {state.port}
api_workers = 1
state_path = {work}/state
api_paste_config = {work}/api-paste.ini
transport_url = rabbit://guest:guest@127.0.0.1:5672/{state.vhost}
control_exchange = {exchange}
use_stderr = false
debug = false
log_dir = {work}/logs

[database]
connection = postgresql+psycopg2://postgres@127.0.0.1:5432/{state.database}?plugin=lccn_tacker_pg

[vnf_package]
vnf_package_csar_path = {work}/csar

[glance_store]
default_backend = file
filesystem_store_datadir = {work}/images

[oslo_concurrency]
lock_path = {work}/locks

[vnf_lcm]
endpoint_url = {state.url}/

[tacker]
vnflcm_mgmt_driver = {mgmt_drivers}

[vim_keys]
openstack = {work}/vim_keys

[openstack_vim]
stack_retry_wait = 1
stack_retries = 120

[v2_vnfm]
endpoint = {state.url}
notify_connect_retries = 0

[v2_nfvo]
endpoint = {state.url}

[keystone_authtoken]
auth_type = password
auth_url = {state.keystone_url}
username = {sim.username}
password = {sim.password}
project_name = {sim.project_name}
user_domain_name = {sim.domain}
project_domain_name = {sim.domain}
"""
    path = work / "tacker.conf"
    path.write_text(conf)
    # The conductor logs nothing at INFO once its RPC consumer runs; its periodic-task
    # loop (started right after the consumer, with no fuzzy delay) logs at DEBUG. Only
    # that logger is let through at DEBUG.
    quiet = ",".join(f"{name}=INFO" for name in _QUIET_LOGGERS)
    (work / "conductor.conf").write_text(
        "[DEFAULT]\n"
        "debug = true\n"
        "periodic_fuzzy_delay = 0\n"
        f"default_log_levels = {quiet},{_READY_LOGGER}=DEBUG\n"
    )
    return path


def _start_key_manager(state: BedState) -> None:
    """The bed's Keystone and Barbican: a simulator in a session of its own (stop() ends
    it with Tacker's processes); returns once it listens."""
    sim = SimProcess()
    try:
        sim.start(log=Path(state.workdir) / "logs" / "openstack-sim.out", new_session=True)
    except RuntimeError as exc:
        raise BedError(f"the bed's simulated Keystone/Barbican did not start: {exc}") from exc
    assert sim.proc is not None
    _CHILDREN[sim.proc.pid] = sim.proc
    state.pids["openstack-sim"] = sim.proc.pid
    state.keystone_url, state.sim_url = sim.auth_url, sim.url


_READY_LOGGER = "oslo.service.backend._threading.loopingcall"
_READY_LINE = "tacker.service.Service.periodic_tasks"
_QUIET_LOGGERS = (
    "tacker",
    "oslo",
    "oslo_service",
    "oslo.service",
    "oslo_messaging",
    "oslo.messaging",
    "oslo_db",
    "oslo_concurrency",
    "oslo_policy",
    "oslo_config",
    "cotyledon",
    "amqp",
    "kombu",
    "keystoneauth",
    "keystoneauth1",
    "keystonemiddleware",
    "urllib3",
    "requests",
    "stevedore",
    "sqlalchemy",
    "alembic",
    "futurist",
    "openstack",
    "glance_store",
    "routes",
    "iso8601",
    "taskflow",
    "migrate",
    "eventlet",
    "paramiko",
    "tosca",
    "toscaparser",
    "heatclient",
)


def _log_tail(state: BedState, lines: int = 40) -> str:
    out = []
    for log in sorted((Path(state.workdir) / "logs").glob("*.log")):
        text = log.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"--- {log.name}\n" + "\n".join(text))
    return "\n".join(out)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ready(state: BedState) -> bool:
    try:
        status, _, body = request("GET", f"{state.url}/vnflcm/v2/api_versions", timeout=2)
    except OSError:
        return False
    if status != 200 or not isinstance(body, dict):
        return False
    # The API answers before the conductor listens; its log shows it when it runs its
    # periodic tasks (and the RPC server is up). The eventlet backend (a K1 bed's) logs
    # nothing then: there, RabbitMQ's queues of the bed's vhost show the consumers.
    if state.k1 and state.vhost:
        return _conductor_consumes(state.vhost)
    log = Path(state.workdir) / "logs" / "tacker-conductor.log"
    return log.is_file() and _READY_LINE in log.read_text(errors="replace")


def _conductor_consumes(vhost: str) -> bool:
    """Whether the conductor consumes its v1 and v2 RPC queues on ``vhost``."""
    out = subprocess.run(
        ["rabbitmqctl", "-q", "list_queues", "-p", vhost, "name", "consumers"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    consumers = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    return all(consumers.get(q, "0").strip() not in ("", "0") for q in _CONDUCTOR_QUEUES)


_CONDUCTOR_QUEUES = ("TACKER_CONDUCTOR", "TACKER_CONDUCTOR_V2")


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


def _create_vhost(name: str) -> str:
    """A RabbitMQ vhost of the bed's own; "" (the shared default) without rabbitmqctl.

    Tacker's RPC queues have fixed names (``TACKER_CONDUCTOR``, ``..._V2``) whatever
    ``control_exchange`` says, so two beds on one vhost consume each other's casts: a
    package upload handled by the other bed's conductor never onboards here.
    """
    if shutil.which("rabbitmqctl") is None:
        return ""
    _rabbitmqctl("add_vhost", name)
    _rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
    return name


# The conductor of a K1 bed: Tacker's own tacker-conductor's main(), eventlet-patched
# from the start on oslo.service's eventlet backend (see start()).
_EVENTLET_CONDUCTOR = """\
import sys
from tacker.common import eventlet_utils
eventlet_utils.monkey_patch()
from oslo_service import backend
backend.init_backend(backend.BackendType.EVENTLET)
from tacker.cmd.conductor import main
sys.exit(main())
"""


def start(
    *, startup_timeout: float = 120.0, owner_pid: int | None = None, k1: bool = False
) -> BedState:
    """Start conductor and server; returns once the v2 API and the conductor are ready.

    Arguments:
        owner_pid: when given, a watchdog process stops the bed (kills Tacker, drops the
            database) once that process is gone, so a killed test run leaves nothing
            running. The CLI ``start`` passes none: its bed lives until ``stop``.
        k1: a bed for Tacker's own v1 Kubernetes driver (``KubernetesMgmtDriver`` of the
            sdist's samples, installed by ``scripts/setup.d/22-tacker-k1.sh``; see
            ``tests/testbed/tacker_driver_v1.py``): ``[tacker] vnflcm_mgmt_driver`` names it
            beside ``vnflcm_noop``, and the conductor runs eventlet-patched from the start.
            K1 calls ``eventlet.monkey_patch()`` inside the conductor when it runs its
            first command; Tacker 16.0.0's conductor runs oslo.service's threading
            backend, and patching it then mixes native threads with green locks: the
            SSH transport's thread (started before) never wakes the channel's now-green
            event, the command times out, and the conductor is left broken for every
            later operation ("cannot notify on un-acquired lock"; the op-occ stays
            PROCESSING). Started patched (as Tacker still starts its API server:
            ``tacker.cmd.eventlet``), the driver's call patches nothing new. Never the
            run's shared bed: that one keeps Tacker's own threading conductor.

    Raises:
        BedError: not installed, a process died, or not ready in time (log tail inside).
    """
    if not is_installed():
        raise BedError(
            f"Tacker {TACKER_VERSION} is not installed in {tacker_venv()}: "
            "run bash scripts/setup.d/20-tacker.sh"
        )
    if k1 and not k1_installed():
        raise BedError(
            "Tacker's v1 Kubernetes driver is not in Tacker's venv: "
            "run bash scripts/setup.d/22-tacker-k1.sh"
        )
    t0 = time.monotonic()
    db = f"lccn_tacker_{uuid.uuid4().hex[:12]}"
    state = BedState(
        port=free_port(),
        database=db,
        workdir=tempfile.mkdtemp(prefix="lccn-tacker-bed-"),
        k1=k1,
    )
    try:
        _psql_python(f'CREATE DATABASE "{db}"')
        state.vhost = _create_vhost(db)
        _start_key_manager(state)
        conf = _write_config(state)
        bin_dir = tacker_venv() / "bin"
        base_env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(PG_PLUGIN), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        manage = subprocess.run(
            [str(bin_dir / "tacker-db-manage"), "--config-file", str(conf), "upgrade", "head"],
            cwd=state.workdir,
            env=base_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if manage.returncode != 0:
            raise BedError(f"tacker-db-manage failed:\n{manage.stderr[-4000:]}")
        _fit_v1_schema(db)
        for name in ("tacker-conductor", "tacker-server"):
            cmd = [str(bin_dir / name), "--config-file", str(conf)]
            if name == "tacker-conductor" and k1:
                # A file named as Tacker's: oslo.log names the log file after the program.
                launcher = Path(state.workdir) / name
                launcher.write_text(_EVENTLET_CONDUCTOR)
                cmd = [str(bin_dir / "python"), str(launcher), *cmd[1:]]
            if name == "tacker-conductor":
                cmd += ["--config-file", str(Path(state.workdir) / "conductor.conf")]
            # A session of its own: api workers are forked children, stop() ends the group.
            # The package's management-driver scripts run in the conductor, with its env.
            env = {**base_env, "LCCN_HOOK_CONFIG": str(state.hook_config)}
            with (Path(state.workdir) / "logs" / f"{name}.out").open("wb") as out:
                proc = subprocess.Popen(
                    cmd,
                    cwd=state.workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            _CHILDREN[proc.pid] = proc  # kept, so stop() can reap it (no zombie, no warning)
            state.pids[name] = proc.pid
        deadline = time.monotonic() + startup_timeout
        while not _ready(state):
            dead = [n for n, pid in state.pids.items() if not _pid_running(pid)]
            if dead:
                raise BedError(f"{', '.join(dead)} exited during start-up:\n{_log_tail(state)}")
            if time.monotonic() > deadline:
                raise BedError(
                    f"Tacker not ready after {startup_timeout:.0f} s:\n{_log_tail(state)}"
                )
            time.sleep(0.25)
        state.started_in = round(time.monotonic() - t0, 1)
        if owner_pid is not None:
            state.watchdog_pid = _start_watchdog(state, owner_pid)
        return state
    except BaseException:
        stop(state)
        raise


_CHILDREN: dict[int, subprocess.Popen[Any]] = {}


def _pid_running(pid: int) -> bool:
    # Reap it if it is our exited child, so a dead process is not mistaken for a zombie.
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        del _CHILDREN[pid]
        return False
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    return _alive(pid)


def _start_watchdog(state: BedState, owner_pid: int) -> int:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "watch",
            "--owner",
            str(owner_pid),
            "--state-json",
            json.dumps(asdict(state)),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _CHILDREN[proc.pid] = proc
    return proc.pid


def _watch(owner_pid: int, state: BedState) -> None:
    """Poll the owner; when it is gone, stop the bed. SIGTERM ends the watch quietly."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while _alive(owner_pid):
        time.sleep(1.0)
    state.watchdog_pid = None
    stop(state)


def stop(state: BedState, *, grace: float = 5.0) -> None:
    """Kill both processes (SIGTERM, then SIGKILL after ``grace``), drop the DB; idempotent."""
    if state.watchdog_pid is not None:  # first, so it does not race this stop
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(state.watchdog_pid, signal.SIGTERM)
        while _pid_running(state.watchdog_pid):
            time.sleep(0.05)
        state.watchdog_pid = None
    for pid in state.pids.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_pid_running(p) for p in state.pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in state.pids.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    for pid in state.pids.values():
        end = time.monotonic() + 5
        while _pid_running(pid) and time.monotonic() < end:
            time.sleep(0.05)
    state.pids.clear()
    if state.database:
        try:
            _psql_python(f'DROP DATABASE IF EXISTS "{state.database}" WITH (FORCE)')
        except (subprocess.SubprocessError, OSError) as exc:
            print(f"warning: could not drop {state.database}: {exc}", file=sys.stderr)
    if state.vhost:
        try:
            _rabbitmqctl("delete_vhost", state.vhost)
        except (subprocess.SubprocessError, OSError) as exc:
            print(f"warning: could not delete vhost {state.vhost}: {exc}", file=sys.stderr)
        state.vhost = ""
    if state.workdir and os.environ.get("LCCN_TACKER_BED_KEEP") != "1":
        shutil.rmtree(state.workdir, ignore_errors=True)


def onboard(state: BedState, zip_path: Path, *, timeout: float = 60.0, record: bool = True) -> str:
    """Create a VNF package, upload the zip, wait for ONBOARDED; returns the package id.

    ``record``: keep its ids as the bed's package (``state.vnf_package_id``, ``vnfd_id``).
    """
    status, _, body = request("POST", f"{state.url}/vnfpkgm/v1/vnf_packages", {})
    if status != 201:
        raise BedError(f"create VNF package: {status} {body}")
    pkg_id = body["id"]
    status, _, body = request(
        "PUT",
        f"{state.url}/vnfpkgm/v1/vnf_packages/{pkg_id}/package_content",
        data=zip_path.read_bytes(),
        headers={"Content-Type": "application/zip"},
    )
    if status != 202:
        raise BedError(f"upload VNF package: {status} {body}")
    deadline = time.monotonic() + timeout
    while True:
        status, _, body = request("GET", f"{state.url}/vnfpkgm/v1/vnf_packages/{pkg_id}")
        if status == 200 and body.get("onboardingState") == "ONBOARDED":
            if record:
                state.vnf_package_id, state.vnfd_id = pkg_id, body["vnfdId"]
            return str(pkg_id)
        if (
            status == 200
            and body.get("onboardingState") == "CREATED"
            and time.monotonic() > 5 + (deadline - timeout)
            and _upload_failed(state)
        ):
            raise BedError(f"onboarding failed:\n{_log_tail(state)}")
        if time.monotonic() > deadline:
            raise BedError(
                f"package {pkg_id} not ONBOARDED in {timeout} s: {body}\n{_log_tail(state)}"
            )
        time.sleep(0.25)


def _upload_failed(state: BedState) -> bool:
    log = Path(state.workdir) / "logs" / "tacker-conductor.log"
    return log.is_file() and "ERROR" in log.read_text(errors="replace")


def register_openstack_vim(
    state: BedState,
    auth_url: str,
    login: dict[str, str],
    *,
    name: str = "default-openstack",
    default: bool = True,
) -> str:
    """Register the default OpenStack VIM (``POST /v1.0/vims``): what ``/vnflcm/v1`` needs
    to create an instance without ``vimConnectionInfo``, as seed 000's ``openstack vim
    list`` shows. Tacker checks the login with Keystone (a token, ``GET /v3/regions``).

    ``login``: ``username``, ``password``, ``project_name`` and the domains. Returns the
    VIM id.
    """
    body = {
        "vim": {
            "type": "openstack",
            "name": name,
            "description": "the cloud of the test bed (its simulated OpenStack)",
            "is_default": default,
            "tenant_id": PROJECT_ID,
            "auth_url": auth_url,
            "auth_cred": {
                "username": login["username"],
                "password": login["password"],
                "user_domain_name": login.get("user_domain_name", "Default"),
                "cert_verify": "False",
            },
            "vim_project": {
                "name": login["project_name"],
                "project_domain_name": login.get("project_domain_name", "Default"),
            },
        }
    }
    status, _, answer = request("POST", f"{state.url}/v1.0/vims", body)
    if status != 201:
        raise BedError(f"register the OpenStack VIM: {status} {answer}")
    vim_id = str(answer["vim"]["id"])
    return vim_id


def build_and_onboard(
    state: BedState,
    package: str = "kubernetes_cluster",
    *,
    extra: dict[str, str | bytes] | None = None,
) -> str:
    """Build a sample package with a fresh vnfdId and onboard it; returns the vnfdId.

    ``package`` names a directory of ``scripts/vnf_package/``; ``extra``: files added to
    the zip, or put in place of the package's own (path in the package -> content).
    Only the default package as it is (the cluster VNF) becomes the bed's own package
    (``state.vnfd_id``).
    """
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    from build_vnf_package import DEFAULT_PACKAGE, build_package

    # The API casts the upload to the conductor over RabbitMQ; on a loaded
    # machine a cast can be lost and the package stays UPLOADING for ever.
    # Onboard a freshly built package again (a new vnfdId: a stuck one may keep
    # its vnfdId taken) rather than fail the whole bed.
    for attempt in range(1, 4):
        zip_path, vnfd_id = build_package(
            Path(state.workdir) / f"{package}_{uuid.uuid4().hex[:8]}_{attempt}.zip",
            package=package,
        )
        if extra:
            _add_to_zip(zip_path, extra)
        try:
            onboard(
                state,
                zip_path,
                timeout=30.0 if attempt < 3 else 60.0,
                record=package == DEFAULT_PACKAGE and not extra,
            )
            return vnfd_id
        except BedError as exc:
            if attempt == 3 or "UPLOADING" not in str(exc):
                raise
            print(
                f"tacker bed: upload attempt {attempt} stuck in UPLOADING; retrying",
                file=sys.stderr,
            )
    raise AssertionError("unreachable")


def _add_to_zip(zip_path: Path, files: dict[str, str | bytes]) -> None:
    """Add ``files`` to the zip; one of the same name replaces the package's own."""
    with zipfile.ZipFile(zip_path) as archive:
        kept = [(i, archive.read(i)) for i in archive.infolist() if i.filename not in files]
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as archive:
        for info, content in kept:
            archive.writestr(info, content)
        for name, content in files.items():
            archive.writestr(name, content)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start Tacker, print its state as JSON")
    s.add_argument("--state-file", required=True)
    s.add_argument("--onboard", action="store_true", help="build + onboard the sample package")
    t = sub.add_parser("stop", help="stop the Tacker of a state file")
    t.add_argument("--state-file", required=True)
    w = sub.add_parser("watch", help=argparse.SUPPRESS)
    w.add_argument("--owner", type=int, required=True)
    w.add_argument("--state-json", required=True)
    args = p.parse_args()
    if args.cmd == "watch":
        _watch(args.owner, BedState(**json.loads(args.state_json)))
        return
    if args.cmd == "start":
        state = start()
        try:
            if args.onboard:
                build_and_onboard(state)
        except BaseException:
            stop(state)
            raise
        Path(args.state_file).write_text(json.dumps(asdict(state), indent=2))
        print(json.dumps({**asdict(state), "url": state.url}))
    else:
        path = Path(args.state_file)
        stop(BedState(**json.loads(path.read_text())))
        path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
