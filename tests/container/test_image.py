"""The Dockerfile builds an image that runs: built with podman from a Debian-made base
(``--build-arg BASE``) with the wheels of this checkout (``WHEELS=context``), then run
with ``--network host`` against the machine's PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import uuid
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from subscriber.store.tables import EventStatus
from tests.backends import pg_database, pg_dsn
from tests.conftest import free_port
from tests.container.cluster_http import HttpTacker, sim_cluster_vnf
from tests.container.podman import BASE, Podman
from tests.factories import op_occ
from tests.otlp import otlp_receiver
from tests.testbed import testhosts
from tests.testbed.cluster_vnf import k8s_params
from tests.testbed.openstack_sim import OpenStackSim, SimConfig


def test_the_image_runs_as_its_own_user_with_a_healthcheck_and_the_node_scripts(
    podman: Podman, image: str
) -> None:
    (info,) = json.loads(podman("image", "inspect", image).stdout)
    config = info["Config"]
    assert config["User"] == "lccn"
    assert config["Cmd"] == ["lccn-subscriber", "serve"]
    health = info["Healthcheck"]["Test"]
    assert health[0] == "CMD" and "/healthz" in health[-1]
    size_mb = info["Size"] / 1e6
    print(f"image {image}: {size_mb:.0f} MB on {BASE}")
    assert size_mb < 400  # docs/guide/deploy.md records it: keep it small
    # Not root; the node-side scripts are in the installed package.
    probe = (
        "import os, pathlib, handlers.toolkit.node as n; "
        "print(os.getuid(), sorted(p.name for p in pathlib.Path(n.__file__).parent.iterdir()))"
    )
    out = podman("run", "--rm", image, "python3", "-c", probe).stdout.split(" ", 1)
    assert out[0] == "10001"
    assert "install_k8s_cluster.sh" in out[1] and "create_admin_token.yaml" in out[1]
    # The healthcheck asks serve: a container that runs something else is unhealthy (the
    # test below sees a serve healthy).
    name = f"lccn-test-{uuid.uuid4().hex[:8]}"
    idle = ("python3", "-c", "import time; time.sleep(60)")
    podman("run", "--detach", "--name", name, image, *idle)
    try:
        assert podman("healthcheck", "run", name, check=False).returncode != 0
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)


async def _wait_ready(url: str, within: float = 60) -> None:
    async with asyncio.timeout(within), aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)


async def test_in_a_container_the_cli_and_serve_work_and_stop_cleanly(
    podman: Podman, image: str, tmp_path: Path
) -> None:
    async with pg_database() as url:
        # Settings as an operator passes them: a file, never a command line with a secret.
        secret = f"s3cret-{uuid.uuid4().hex}"
        port, metrics = free_port(), free_port()
        env = tmp_path / "lccn.env"
        env.write_text(
            f"LCCN_DATABASE__URL={url}\n"
            f"LCCN_HTTP__PORT={port}\n"
            f"LCCN_HTTP__METRICS_PORT={metrics}\n"
            f"LCCN_TACKER__PASSWORD={secret}\n"
            "LCCN_DISPATCH__REORDER_WINDOW=0.05\n"
        )
        run = ("run", "--rm", "--network", "host", "--env-file", str(env), image)

        upgraded = podman(*run, "lccn-subscriber", "db", "upgrade")
        assert "at revision" in upgraded.stdout + upgraded.stderr
        table = podman(*run, "lccn-subscriber", "handlers", "list").stdout
        assert table.split()[:4] == ["operation", "state", "handler", "steps"]
        shown = json.loads(podman(*run, "lccn-subscriber", "config", "show").stdout)
        assert shown["database"]["url"] == url
        assert shown["http"]["host"] == "0.0.0.0"  # the image's: a container's listener
        assert secret not in json.dumps(shown)

        name = f"lccn-test-{uuid.uuid4().hex[:8]}"
        podman("run", "--detach", "--name", name, *run[2:])  # serve, the image's CMD
        try:
            await _wait_ready(f"http://127.0.0.1:{metrics}/readyz")
            base = f"http://127.0.0.1:{port}"
            occs = []
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{base}/lccn/openapi.json") as resp:
                    assert resp.status == 200
                    assert (await resp.json())["openapi"].startswith("3.1")
                for _ in range(5):
                    body = op_occ(state="COMPLETED")
                    async with http.post(f"{base}/lccn/notifications", json=body) as resp:
                        assert resp.status == 204
                    occs.append(body["vnfLcmOpOccId"])
            assert podman("healthcheck", "run", name, check=False).returncode == 0

            # SIGTERM: a graceful stop, well before podman's own SIGKILL (30 s).
            began = time.monotonic()
            podman("stop", "--time", "30", name, timeout=60)
            assert time.monotonic() - began < 25
            (state,) = json.loads(podman("inspect", name).stdout)
            assert state["State"]["ExitCode"] == 0
            logs = podman("logs", name).stdout + podman("logs", name).stderr
            assert "stopping" in logs and secret not in logs
        finally:
            podman("rm", "--force", name, check=False)

        # Every acknowledged notification is stored, and none was left half-run.
        conn = await asyncpg.connect(pg_dsn(url))
        try:
            rows = await conn.fetch(
                "SELECT vnf_lcm_op_occ_id, status FROM events WHERE vnf_lcm_op_occ_id = ANY($1)",
                occs,
            )
        finally:
            await conn.close()
        assert sorted(r[0] for r in rows) == sorted(occs)
        assert {r[1] for r in rows} <= {"done", "ignored"}


_UID = 10001  # the image's user: the mounted secrets must be readable by it
_SECRETS = "/run/secrets/lccn"


def _secret_copy(source: Path, into: Path, mode: int) -> Path:
    """``source`` copied for mounting: owned by the image's user, ``mode``."""
    into.mkdir(parents=True, exist_ok=True)
    target = into / source.name
    shutil.copyfile(source, target)
    os.chown(target, _UID, _UID)
    target.chmod(mode)
    return target


@pytest.mark.ssh
async def test_in_a_container_serve_builds_a_cluster_over_ssh_with_mounted_secrets(
    podman: Podman, image: str, tmp_path: Path
) -> None:
    """INSTANTIATE COMPLETED -> the image's ``serve`` (cluster handlers on) discovers the
    VNFCs in the simulated OpenStack, builds the stand-in cluster on three sshd test
    hosts with the key and known_hosts mounted read-only, and writes the cluster's
    access back to Tacker. Tracing on (the image's otel extra): the job's trace, from
    ingest to each SSH command, reaches an OTLP receiver, with no secret in it."""
    if os.geteuid() != 0:
        pytest.fail("needs root (network namespaces for the test hosts)")
    bed = testhosts.create(3)
    name = f"lccn-test-{uuid.uuid4().hex[:8]}"
    try:
        master, workers = bed.hosts[0], bed.hosts[1:]
        key = _secret_copy(bed.client_key, tmp_path / "secrets", 0o400)
        known = _secret_copy(bed.known_hosts, tmp_path / "secrets", 0o444)
        key_in, known_in = f"{_SECRETS}/{key.name}", f"{_SECRETS}/known_hosts"
        params = k8s_params(master_user="root", worker_user="root", key=key_in)
        cfg = SimConfig(server_pool=",".join(h.address for h in bed.hosts), vip_pool="10.77.0.200")
        async with OpenStackSim(cfg) as sim, pg_database() as url, otlp_receiver() as otlp:
            fake, inst, occ = await sim_cluster_vnf(
                sim, [master.address], [w.address for w in workers], params
            )
            tacker = HttpTacker(fake)
            await tacker.start()
            try:
                port, metrics = free_port(), free_port()
                login = sim.openstack_settings()
                env = tmp_path / "lccn.env"
                env.write_text(
                    f"LCCN_DATABASE__URL={url}\n"
                    f"LCCN_HTTP__PORT={port}\n"
                    f"LCCN_HTTP__METRICS_PORT={metrics}\n"
                    "LCCN_DISPATCH__REORDER_WINDOW=0.05\n"
                    "LCCN_CLUSTER__HANDLERS=on\n"
                    'LCCN_CLUSTER__SCRIPT_ENV={"K8S_SKIP_PHASES": "packages,cni"}\n'
                    "LCCN_TACKER__AUTH_TYPE=noauth\n"
                    f"LCCN_TACKER__ENDPOINT={tacker.url}\n"
                    + "".join(f"LCCN_OPENSTACK__{k.upper()}={v}\n" for k, v in login.items())
                    + f"LCCN_SSH__KNOWN_HOSTS={known_in}\n"
                    f'LCCN_SSH__CLIENT_KEYS=["{key_in}"]\n'
                    f"LCCN_SSH__KEY_DIR={_SECRETS}\n"
                    "LCCN_SSH__CONNECT_TIMEOUT=5\n"
                    "LCCN_TRACING__ENABLED=true\n"
                    f"LCCN_TRACING__ENDPOINT={otlp.url}/v1/traces\n"
                )
                run = ("--network", "host", "--env-file", str(env))
                mounts = (
                    *("-v", f"{key}:{key_in}:ro"),
                    *("-v", f"{known}:{known_in}:ro"),
                )
                podman("run", "--rm", *run, image, "lccn-subscriber", "db", "upgrade")
                podman("run", "--detach", "--name", name, *run, *mounts, image)
                await _wait_ready(f"http://127.0.0.1:{metrics}/readyz")
                body = op_occ(
                    instance=inst, op_occ_id=occ, operation="INSTANTIATE", state="COMPLETED"
                )
                async with aiohttp.ClientSession() as http:
                    notify = f"http://127.0.0.1:{port}/lccn/notifications"
                    async with http.post(notify, json=body) as resp:
                        assert resp.status == 204
                status = await _event_status(url, occ, within=180)
                # A graceful stop: both processes flush their spans as they exit.
                podman("stop", "--time", "30", name)
                logs = podman("logs", name).stdout + podman("logs", name).stderr
                assert status == "done", logs[-4000:]
            finally:
                podman("rm", "--force", "--time", "0", name, check=False)
                await tacker.close()

        # The stand-in cluster: the master initialised, both workers joined it.
        suffix = {h: h.address.rsplit(".", 1)[1] for h in bed.hosts}
        nodes = set(bed.state()["nodes"])  # type: ignore[arg-type]
        assert nodes == {f"master{suffix[master]}"} | {f"worker{suffix[w]}" for w in workers}
        kubeadm = [c["argv"] for c in bed.calls() if c["tool"] == "kubeadm"]
        inits = [a for a in kubeadm if a[:1] == ["init"] and a[1:2] != ["phase"]]
        assert len(inits) == 1
        # The write-back reached the fake Tacker: our entry, the master's API server.
        # (The other PATCH is the job's status report, in ``metadata``.)
        writes = [b for i, b in tacker.patches if i == inst and "vimConnectionInfo" in b]
        assert len(writes) == 1 and {i for i, _ in tacker.patches} == {inst}
        entry = fake.instances[inst]["vimConnectionInfo"]["k8s"]  # tacker.vim_key
        assert entry["interfaceInfo"]["endpoint"] == f"https://{master.address}:6443"
        # No secret in what the container logged.
        token = entry["accessInfo"]["bearer_token"]
        assert token
        secrets = [key.read_text().strip(), cfg.password, token]
        assert not [s for s in secrets if s in logs]
        assert "BEGIN OPENSSH PRIVATE KEY" not in logs
        # One trace: the ingest process's span, the worker's job, its steps and commands.
        (ingest,) = otlp.named("ingest")
        (job,) = otlp.named("job")
        assert (ingest["role"], job["role"]) == ("ingest", "worker")
        assert job["trace_id"] == ingest["trace_id"] and job["parent"] == ingest["span_id"]
        ssh = otlp.named("ssh")
        assert {s["trace_id"] for s in ssh} == {job["trace_id"]}
        peers = {s["attributes"]["net.peer.name"].string_value for s in ssh}
        assert peers == {h.address for h in bed.hosts}
        # The install script and the join data run as ``bash -c`` scripts (one command
        # each rather than a kubeadm call per value), the uploads as ``upload``.
        assert {"bash", "upload"} <= {s["attributes"]["lccn.command"].string_value for s in ssh}
        exported = repr(otlp.spans)
        assert not [s for s in secrets if s in exported]
    finally:
        testhosts.destroy(bed)


async def _event_status(url: str, occ: str, within: float) -> str:
    """The stored event's status once it is no longer pending or running."""
    conn = await asyncpg.connect(pg_dsn(url))
    try:
        async with asyncio.timeout(within):
            while True:
                status = await conn.fetchval(
                    "SELECT status FROM events WHERE vnf_lcm_op_occ_id = $1", occ
                )
                if status is not None and status not in EventStatus.OPEN:
                    return str(status)
                await asyncio.sleep(0.5)
    finally:
        await conn.close()
