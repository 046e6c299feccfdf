#!/usr/bin/env python3
"""The floor of the relay: the least a server can do and still have the broker hold every
notification before it answers.

An aiohttp server whose POST reads the body, produces it unchanged to the topic keyed by
a key read cheaply from the body (no schema validation, no auth, no metrics, no
headers), with aiokafka's producer at ``acks=all``, and answers 204 once the broker
acknowledged it. ``bench/relay.py`` runs it beside ``serve --role relay`` on the same
broker: how far the relay is from what its durable job costs here.

Usage (by bench/relay.py): python bench/relay_floor.py PORT PATH BOOTSTRAP TOPIC
"""

from __future__ import annotations

import asyncio
import json
import sys

from aiohttp import web
from aiokafka import AIOKafkaProducer
from benchlib import serve_until_terminated


async def serve_floor(port: int, path: str, bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()

    async def post(request: web.Request) -> web.Response:
        raw = await request.read()
        key = str(json.loads(raw).get("vnfInstanceId", "")).encode()
        await producer.send_and_wait(topic, raw, key=key)
        return web.Response(status=204)

    try:
        await serve_until_terminated(port, path, post)
    finally:
        await producer.stop()


if __name__ == "__main__":
    port, path, bootstrap, topic = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    asyncio.run(serve_floor(port, path, bootstrap, topic))
