"""The Dockerfile builds an image that runs: built with podman from a Debian-made base
(``--build-arg BASE``) with the wheels of this checkout (``WHEELS=context``), then run
with ``--network host`` against the machine's PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import aiohttp
import asyncpg

from tests.backends import pg_database, pg_dsn
from tests.conftest import free_port
from tests.container.podman import BASE, Podman
from tests.factories import op_occ


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
