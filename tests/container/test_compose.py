"""compose.yaml's own service definitions, run by ``podman-compose``: two replicas of the
image (built once a session), with the secrets mounted as compose mounts them, pointed
by an override file at the machine's PostgreSQL and the Tansu broker (the postgres and
kafka images cannot be pulled here). They take notifications on both callbacks, share
one Kafka consumer group, and run each job exactly once.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import asyncssh
import pytest

from tests import REPO
from tests.backends import pg_database, pg_dsn
from tests.conftest import basic, free_port
from tests.container.podman import Podman
from tests.factories import op_occ
from tests.kafka.helpers import create_topic, delete_topic, notification, produce
from tests.testbed.kafka_broker import Broker

pytestmark = pytest.mark.kafka

# The secrets compose.yaml declares, as the operator's files (ssh_key and known_hosts
# are made below).
_VALUES = ("callback_password", "hook_token", "tacker_password", "openstack_password")
_HTTP, _KAFKA = 4, 12  # notifications posted to each replica; records produced


class Compose:
    """``podman-compose`` on compose.yaml plus an override, as project ``name``."""

    def __init__(self, podman: Podman, override: Path, env: dict[str, str]) -> None:
        self.name = f"lccntest{uuid.uuid4().hex[:8]}"
        self.files = ("-f", str(REPO / "compose.yaml"), "-f", str(override))
        self.env = {**os.environ, **env, "CONTAINERS_CONF": str(podman.conf)}

    _cli = (sys.executable, "-m", "podman_compose")

    def __call__(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            [*self._cli, "--in-pod", "false", "-p", self.name, *self.files, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, (
            f"podman-compose {args[0]}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        return done.stdout


def _secrets(root: Path) -> dict[str, Path]:
    """The operator's secret files: one value a file, readable by the image's user."""
    root.mkdir()
    files = {name: root / name for name in (*_VALUES, "ssh_key", "known_hosts")}
    for name in _VALUES:
        files[name].write_text(f"{name}-{uuid.uuid4().hex}\n")
    key = asyncssh.generate_private_key("ssh-ed25519")
    files["ssh_key"].write_bytes(key.export_private_key())
    host = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    files["known_hosts"].write_text(f"10.0.0.1 {host}")
    for path in files.values():
        path.chmod(0o644)  # compose (no Swarm) mounts them as they are: uid 10001 reads
    return files


def _override(image: str, files: dict[str, Path], env: dict[str, dict[str, str]]) -> str:
    """Our services on the host's network (the machine's PostgreSQL and broker listen on
    127.0.0.1), the session's image, no dependency on the postgres/kafka services, and
    one replica a service: two services, since host-network replicas would share ports."""

    def block(values: dict[str, str]) -> str:
        return "".join(f"      {k}: {json.dumps(v)}\n" for k, v in values.items())

    return (
        "services:\n"
        "  db-migrate:\n"
        f"    image: {image}\n"
        "    network_mode: host\n"
        "    depends_on: !reset {}\n"
        "    environment:\n" + block(env["db-migrate"]) + "  lccn-subscriber:\n"
        f"    image: {image}\n"
        "    network_mode: host\n"
        "    depends_on: !reset {}\n"
        "    deploy: {replicas: 1}\n"
        "    environment:\n" + block(env["lccn-subscriber"]) + "  lccn-subscriber-2:\n"
        "    extends: {service: lccn-subscriber}\n"
        "    environment:\n"
        + block(env["lccn-subscriber-2"])
        + "secrets:\n"
        + "".join(f"  {name}: {{file: {path}}}\n" for name, path in files.items())
    )


async def _scrape(http: aiohttp.ClientSession, port: int) -> str:
    async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


def _series(text: str, name: str) -> dict[str, float]:
    """``labels -> value`` of one metric in a Prometheus text scrape."""
    found = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, _, value = line.rpartition(" ")
            found[labels[len(name) :]] = float(value)
    return found


async def _until(check: Any, within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while True:
        result = await check()
        if result:
            return result
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        await asyncio.sleep(0.3)


async def test_two_replicas_from_compose_share_the_callbacks_the_group_and_the_jobs(
    podman: Podman, image: str, broker: Broker, tmp_path: Path
) -> None:
    began = time.monotonic()
    topic = f"lccn-compose-{uuid.uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic, 3)
    files = _secrets(tmp_path / "secrets")
    ports = [(free_port(), free_port()) for _ in range(2)]
    async with pg_database() as url:
        keystone = f"http://127.0.0.1:{free_port()}/v3"  # nobody listens: never reached
        common = {
            "LCCN_DATABASE__URL": url,
            "LCCN_HTTP__HOST": "127.0.0.1",  # the host's network: not all interfaces
            "LCCN_HTTP__METRICS_HOST": "127.0.0.1",
            "LCCN_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap,
            "LCCN_KAFKA__TOPICS": topic,
            "LCCN_KAFKA__GROUP_ID": f"g-{topic}",
            # Tansu joins slowly with the defaults (tests/kafka/helpers.py).
            "LCCN_KAFKA__SESSION_TIMEOUT": "6",
            "LCCN_KAFKA__HEARTBEAT_INTERVAL": "0.5",
            "LCCN_KAFKA__COMMIT_INTERVAL": "0.2",
            "LCCN_TACKER__RECONCILE_INTERVAL": "0",  # no Keystone here to poll Tacker through
            "LCCN_DISPATCH__REORDER_WINDOW": "0.05",
        }
        env = {
            "db-migrate": {"LCCN_DATABASE__URL": url},
            "lccn-subscriber": {
                **common,
                "LCCN_HTTP__PORT": str(ports[0][0]),
                "LCCN_HTTP__METRICS_PORT": str(ports[0][1]),
            },
            "lccn-subscriber-2": {
                "LCCN_HTTP__PORT": str(ports[1][0]),
                "LCCN_HTTP__METRICS_PORT": str(ports[1][1]),
            },
        }
        override = tmp_path / "compose.override.yaml"
        override.write_text(_override(image, files, env))
        # What compose.yaml requires of the operator's environment (no secret in it).
        compose = Compose(
            podman,
            override,
            {
                "LCCN_DB_PASSWORD": "unused-the-override-names-the-database",
                "LCCN_KEYSTONE_URL": keystone,
                "LCCN_TACKER_USER": "tacker",
                "LCCN_TACKER_PROJECT": "nfv",
                "LCCN_OPENSTACK_USER": "nova-reader",
                "LCCN_OPENSTACK_PROJECT": "vnfs",
            },
        )
        ours = ("lccn-subscriber", "lccn-subscriber-2")
        try:
            compose("run", "--rm", "db-migrate")
            compose("up", "-d", "--no-deps", *ours)
            await _stack(compose, podman, files, ports, topic, broker, url)
        finally:
            logs = "".join(
                podman("logs", f"{compose.name}_{svc}_1", check=False).stdout
                + podman("logs", f"{compose.name}_{svc}_1", check=False).stderr
                for svc in ours
            )
            compose("down", "-t", "10", timeout=120)
            await delete_topic(broker.bootstrap, topic)
        for name in _VALUES:  # no secret in the replicas' logs
            assert files[name].read_text().strip() not in logs
    print(f"compose stack: {time.monotonic() - began:.1f} s")


async def _stack(
    compose: Compose,
    podman: Podman,
    files: dict[str, Path],
    ports: list[tuple[int, int]],
    topic: str,
    broker: Broker,
    url: str,
) -> None:
    password = files["callback_password"].read_text().strip()
    first = f"{compose.name}_lccn-subscriber_1"
    async with aiohttp.ClientSession() as http:

        async def ready() -> bool:
            for _, metrics in ports:
                try:
                    async with http.get(f"http://127.0.0.1:{metrics}/readyz") as resp:
                        if resp.status != 200:
                            return False
                except aiohttp.ClientError:
                    return False
            return True

        await _until(ready, 60, "both replicas ready")

        # The compose settings reached serve: the cluster handlers route, the secrets
        # are settings (masked), the key and known_hosts are readable where they point.
        table = podman("exec", first, "lccn-subscriber", "handlers", "list").stdout
        assert "cluster-instantiate" in table
        shown = json.loads(podman("exec", first, "lccn-subscriber", "config", "show").stdout)
        assert shown["tacker"]["password"] == shown["openstack"]["password"] == "***"
        assert shown["hooks"]["token"] == "***"
        probe = (
            "import asyncssh; asyncssh.read_private_key('/run/secrets/ssh_key'); "
            "asyncssh.read_known_hosts('/run/secrets/known_hosts'); print('ok')"
        )
        assert podman("exec", first, "python3", "-c", probe).stdout.strip() == "ok"
        denied = podman("exec", first, "sh", "-c", "echo x > /run/secrets/ssh_key", check=False)
        assert denied.returncode != 0  # mounted read-only

        # Both callbacks take notifications, with the password of the secret only.
        posted = []
        for port, _ in ports:
            base = f"http://127.0.0.1:{port}/lccn/notifications"
            wrong = {"Authorization": basic("tacker", "wrong")}
            async with http.post(base, json=op_occ(), headers=wrong) as resp:
                assert resp.status == 401
            for _ in range(_HTTP):
                body = op_occ(operation="MODIFY_INFO", state="COMPLETED")
                auth = {"Authorization": basic("tacker", password)}
                async with http.post(base, json=body, headers=auth) as resp:
                    assert resp.status == 204, await resp.text()
                posted.append(body["vnfLcmOpOccId"])

        # One group: the partitions are split between the two (each reports its own).
        async def split() -> bool:
            owned = []
            for _, metrics in ports:
                lag = _series(await _scrape(http, metrics), "lccn_consumer_lag")
                owned.append({labels for labels in lag})
            return (
                bool(owned[0] and owned[1])
                and not owned[0] & owned[1]
                and len(owned[0] | owned[1]) == 3
            )

        await _until(split, 45, "the 3 partitions split between the two replicas")
        records = [
            notification(
                f"vnf-{i}-{uuid.uuid4().hex[:6]}",
                f"occ-{uuid.uuid4().hex}",
                "COMPLETED",
                "RESULT",
                operation="MODIFY_INFO",
            )
            for i in range(_KAFKA)
        ]
        # Each partition gets records: twelve keys could all hash to one replica's two.
        await produce(broker.bootstrap, topic, records, spread=3)
        consumed = [r["vnfLcmOpOccId"] for r in records]

        conn = await asyncpg.connect(pg_dsn(url))
        try:

            async def settled() -> list[Any]:
                rows = await conn.fetch(
                    "SELECT e.vnf_lcm_op_occ_id, e.status, e.source,"
                    " (SELECT count(*) FROM jobs j WHERE j.event_id = e.id) AS jobs,"
                    " (SELECT coalesce(sum(s.attempts), 0) FROM steps s JOIN jobs j"
                    "   ON s.job_id = j.id WHERE j.event_id = e.id) AS step_runs"
                    " FROM events e"
                )
                done = [r for r in rows if r["status"] in ("done", "ignored")]
                return rows if len(done) == len(posted) + len(consumed) else []

            rows = await _until(settled, 45, "every notification and record run")
        finally:
            await conn.close()
        # Each stored once, each run by exactly one job whose one step ran once.
        assert sorted(r["vnf_lcm_op_occ_id"] for r in rows) == sorted(posted + consumed)
        assert {r["source"] for r in rows if r["vnf_lcm_op_occ_id"] in consumed} == {"kafka"}
        assert all(r["status"] == "done" and r["jobs"] == 1 and r["step_runs"] == 1 for r in rows)

        # Both replicas consumed records and ran jobs; neither ran one twice.
        kafka, runs, owned = [], [], []
        for _, metrics in ports:
            text = await _scrape(http, metrics)
            received = _series(text, "lccn_events_received_total")
            kafka.append(sum(v for k, v in received.items() if 'source="kafka"' in k))
            runs.append(sum(_series(text, "lccn_jobs_total").values()))
            owned.append(sorted(_series(text, "lccn_consumer_lag")))
        # A failure here with one replica owning nothing now means the group rebalanced.
        assert sum(kafka) == _KAFKA and min(kafka) > 0, (kafka, owned)
        assert sum(runs) == len(rows), runs
