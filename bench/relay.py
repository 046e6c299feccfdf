#!/usr/bin/env python3
"""Relay throughput: ``serve --role relay`` against the relay's floor, on one broker.

The floor (``bench/relay_floor.py``) is a bare aiohttp server that produces each
POSTed body to the topic with aiokafka (``acks=all``) and answers 204 once the broker
acknowledged it: what the relay's durable job costs here, without its validation,
auth, metrics and headers. Both run in the same run on the same local Tansu broker,
each alone, under a closed loop of concurrent senders (keep-alive), then at half of
its own maximum for the latency. The last line is ``ratio=`` ours / floor.

Usage: python bench/relay.py [--requests N] [--concurrency C]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from benchlib import PATH, ROOT, free_port, machine, notification, server_process, wait_ready
from ingest import paced, saturate, spread

from tests.testbed import kafka_broker


def body(i: int) -> bytes:
    return notification(str(uuid.uuid4()), str(uuid.uuid4()), state="STARTING", vnfcs=1)


async def create_topic(bootstrap: str, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 3, 1)])
    finally:
        await admin.close()


async def measure(
    url: str, proc: subprocess.Popen[bytes], n: int, c: int
) -> tuple[float, str, str]:
    await wait_ready(url, proc)
    await saturate(url, [body(i) for i in range(200)], c)  # warm-up
    rate, latencies = await saturate(url, [body(i) for i in range(n)], c)
    half = rate / 2
    half_rate, half_lat = await paced(
        url, [body(i) for i in range(max(300, int(half * 3)))], half, c
    )
    return rate, spread(latencies), f"{spread(half_lat)} ({half_rate:.0f} req/s)"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    n, c = args.requests, args.concurrency
    print(f"relay, {n} timed requests from {c} concurrent senders (keep-alive), each server alone")
    print("broker: Tansu (local, in memory); acks=all for both sides")
    print(machine())
    with tempfile.TemporaryDirectory(prefix="lccn-bench-") as tmp:
        broker = kafka_broker.start_broker(log=Path(tmp) / "tansu.log")
        try:
            floor_topic, our_topic = (
                f"floor-{uuid.uuid4().hex[:8]}",
                f"relay-{uuid.uuid4().hex[:8]}",
            )
            for topic in (floor_topic, our_topic):
                await create_topic(broker.bootstrap, topic)
            port = free_port()
            url = f"http://127.0.0.1:{port}{PATH}"
            floor_argv = [
                sys.executable,
                str(ROOT / "bench" / "relay_floor.py"),
                str(port),
                PATH,
                broker.bootstrap,
                floor_topic,
            ]
            with server_process(floor_argv, cwd=ROOT) as floor:
                floor_rate, floor_sat, floor_half = await measure(url, floor, n, c)
            print(
                f"floor (aiohttp -> aiokafka, bench/relay_floor.py): {floor_rate:.0f} req/s "
                f"{floor_sat}; at half its max {floor_half}"
            )
            port = free_port()
            url = f"http://127.0.0.1:{port}{PATH}"
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "LCCN_LOG__LEVEL": "WARNING",
                "LCCN_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap,
                "LCCN_KAFKA__TOPICS": our_topic,
            }
            argv = [sys.executable, "-m", "subscriber.cli", "serve", "--role", "relay"]
            with server_process([*argv, "--port", str(port)], env=env, cwd=ROOT) as proc:
                our_rate, our_sat, our_half = await measure(url, proc, n, c)
            print(
                f"ours (serve --role relay, production defaults): {our_rate:.0f} req/s "
                f"{our_sat}; at half its max {our_half}"
            )
        finally:
            broker.stop()
    print(f"ratio={our_rate / floor_rate:.3f}")


if __name__ == "__main__":
    asyncio.run(main())
