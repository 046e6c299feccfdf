"""The whole loop through Kafka: the real Tacker 16.0.0 -> ``serve --role relay`` -> the
Tansu broker -> two ``serve`` workers in one consumer group on PostgreSQL -> the sshd test
hosts (stand-in kubeadm) -> ``vimConnectionInfo`` written back to Tacker.

Tacker's subscription points at the relay (made by ``lccn-subscriber subscribe`` with
callback credentials it generates into the shared store, which the relay reads); the
workers have no public listener and reach Tacker only for write-back. INSTANTIATE,
SCALE_OUT and TERMINATE of the sample package build, grow and forget the cluster, and
each job runs exactly once across the two workers.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import yaml

from tests.backends import pg_database, pg_dsn
from tests.cluster_fakes import host_params
from tests.e2e.conftest import serve_config
from tests.e2e.day2 import SCALE_ASPECT, kubeadm_calls
from tests.kafka.helpers import create_topic, uid
from tests.programs import ServeProcess, cli
from tests.testbed import kafka_broker
from tests.testbed import tacker_bed as tb
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import (
    NETWORK_ID,
    TackerClient,
    instantiate_request,
    unique_name,
)

pytestmark = [
    pytest.mark.tacker,
    pytest.mark.ssh,
    pytest.mark.kafka,
    pytest.mark.postgres,
    pytest.mark.asyncio,
    pytest.mark.timeout(900),
    pytest.mark.usefixtures("fresh_cluster"),
]


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


async def rows(dsn: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def settled(dsn: str, occ_id: str, state: str = "COMPLETED", within: float = 240) -> Any:
    """The op-occ's event once its job finished; its status must be done."""
    async with asyncio.timeout(within):
        while True:
            found = await rows(
                dsn,
                "SELECT id, status, status_detail FROM events"
                " WHERE vnf_lcm_op_occ_id = $1 AND operation_state = $2",
                occ_id,
                state,
            )
            if found and found[0]["status"] in ("done", "failed", "rejected"):
                assert found[0]["status"] == "done", dict(found[0])
                return found[0]
            await asyncio.sleep(0.3)


@pytest.fixture
async def pg() -> AsyncIterator[str]:
    async with pg_database() as url:
        yield url


async def test_tacker_to_relay_to_kafka_to_two_workers_builds_grows_and_forgets(
    bed: tb.BedState,
    tacker: TackerClient,
    host_sim: SimProcess,
    hosts: Any,
    broker: kafka_broker.Broker,
    pg: str,
    tmp_path: Path,
) -> None:
    assert bed.vnfd_id
    topic, group = uid("tacker-events"), uid("workers")
    await create_topic(broker.bootstrap, topic, partitions=3)
    base = serve_config(bed, host_sim, hosts)
    kafka = {
        "bootstrap_servers": [broker.bootstrap],
        "topics": [topic],
        "group_id": group,
        "session_timeout": 6.0,
        "heartbeat_interval": 0.5,
        "commit_interval": 0.2,
    }
    # Workers: Kafka in, jobs, write-back; no subscription of their own.
    workers_config = {**base, "kafka": kafka}
    workers_config["tacker"] = {**base["tacker"], "subscribe_on_start": False}
    (tmp_path / "relay").mkdir()
    relay = ServeProcess(
        tmp_path / "relay", database=pg, args=("--role", "relay", "--host", "127.0.0.1")
    )
    relay_config = write_config(
        tmp_path / "relay.yaml",
        {
            "kafka": kafka,
            "relay": {"id": "relay-e2e", "produce_timeout": 5.0},
            "tacker": {**base["tacker"], "subscribe_on_start": False, "callback_uri": relay.url},
            "log": base["log"],
        },
    )
    relay.env["LCCN_CONFIG"] = str(relay_config)
    workers = []
    for name in ("w1", "w2"):
        (tmp_path / name).mkdir()
        config = write_config(tmp_path / f"{name}.yaml", workers_config)
        worker = ServeProcess(
            tmp_path / name,
            database=pg,
            args=("--host", "127.0.0.1"),
            env={"LCCN_CONFIG": str(config)},
        )
        workers.append(worker)
    dsn = pg_dsn(pg)
    sub_id = ""
    inst = ""
    try:
        workers[0].start()
        await workers[0].ready()  # it migrates the shared store first
        workers[1].start()
        relay.start()
        await asyncio.gather(workers[1].ready(), relay.ready())
        # Tacker's subscription, to the relay, with credentials generated into the store.
        made = await asyncio.to_thread(
            cli, "subscribe", "--config", str(relay_config), "--database", pg
        )
        assert made.returncode == 0, made.stderr
        [sub_id] = [s["id"] for s in tacker.subscriptions(relay.url)]

        # INSTANTIATE: built by one of the two workers, written back to Tacker.
        t0 = time.time()
        inst = await asyncio.to_thread(tacker.create, bed.vnfd_id, unique_name("kafka-loop"))
        params = host_params(hosts)
        occ = await asyncio.to_thread(
            tacker.run_op,
            inst,
            "instantiate",
            instantiate_request(host_sim.vim_connection_info(), params, NETWORK_ID),
        )
        assert occ["operationState"] == "COMPLETED", occ.get("error")
        await settled(dsn, occ["id"])
        shown = await asyncio.to_thread(tacker.show, inst)
        entries = list((shown.get("vimConnectionInfo") or {}).values())
        assert any(e.get("vimType") == "ETSINFV.KUBERNETES.V_1" for e in entries), entries
        nodes = set(hosts.state()["nodes"])
        masters = [n for n in nodes if n.startswith("master")]
        assert len(masters) == 1 and len(nodes) == 3
        assert len(kubeadm_calls(hosts, "init", masters[0], after=t0)) == 1

        # SCALE_OUT: the new worker joins once.
        t1 = time.time()
        out = await asyncio.to_thread(
            tacker.run_op,
            inst,
            "scale",
            {"type": "SCALE_OUT", "aspectId": SCALE_ASPECT, "numberOfSteps": 1},
        )
        assert out["operationState"] == "COMPLETED", out.get("error")
        await settled(dsn, out["id"])
        grown = set(hosts.state()["nodes"])
        [new] = grown - nodes
        assert len(kubeadm_calls(hosts, "join", new, after=t1)) == 1

        # TERMINATE: the inventory is forgotten.
        end = await asyncio.to_thread(
            tacker.run_op, inst, "terminate", {"terminationType": "FORCEFUL"}
        )
        assert end["operationState"] == "COMPLETED", end.get("error")
        await settled(dsn, end["id"])
        assert await rows(dsn, "SELECT 1 FROM cluster_nodes WHERE vnf_instance_id = $1", inst) == []

        # Exactly once: every event a handler ran has one job, whichever worker ran it
        # (identifier notifications and our write-back's echo run none), and every event
        # came through Kafka with the relay's headers.
        jobs = await rows(
            dsn,
            "SELECT e.id, e.source, e.status, e.operation, e.api_version, e.meta,"
            " count(j.id) AS jobs FROM events e"
            " LEFT JOIN jobs j ON j.event_id = e.id WHERE e.vnf_instance_id = $1"
            " GROUP BY e.id ORDER BY e.id",
            inst,
        )
        ran = [r for r in jobs if r["status"] == "done"]
        ops = {(r["operation"]) for r in ran}
        assert {"INSTANTIATE", "SCALE", "TERMINATE"} <= ops, [dict(r) for r in jobs]
        assert len(ran) >= 9  # STARTING, PROCESSING, COMPLETED of three operations
        for row in jobs:
            assert row["source"] == "kafka" and row["api_version"] == "2.0.0"
            headers = dict(json.loads(row["meta"])["kafka"]["headers"])
            assert headers["lccn-relay"] == "relay-e2e"
            assert row["jobs"] == (1 if row["status"] == "done" else 0), dict(row)
    finally:
        if inst:
            await asyncio.to_thread(_forget, tacker, inst)
        if sub_id:
            tacker.unsubscribe(sub_id)
        for proc in (relay, *workers):
            proc.stop()


def _forget(tacker: TackerClient, inst: str) -> None:
    shown = tacker.show(inst)
    if shown.get("instantiationState") == "INSTANTIATED":
        tacker.run_op(inst, "terminate", {"terminationType": "FORCEFUL"})
    tacker.delete(inst)
