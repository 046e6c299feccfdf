"""Every Tacker URL path segment is escaped: an id cannot reach another resource.

Against a real HTTP server on loopback that records the request line exactly as it
came off the socket (no framework in between to normalise it). Before, the client put
ids into paths as they were, and ``vnf_instances/../../../v1.0/vims`` went out as
``/v1.0/vims``.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator

import pytest

from subscriber.config import TackerSettings
from subscriber.errors import TackerRejected
from subscriber.tacker import TackerClient

pytestmark = pytest.mark.asyncio


class RawServer:
    """Answers every request; keeps each request line verbatim."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.packages: list[dict[str, str]] = []
        self.server: asyncio.Server | None = None
        self.url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line, *headers = head.decode("latin-1").split("\r\n")
            self.lines.append(line)
            length = next(
                (
                    int(h.split(":", 1)[1])
                    for h in headers
                    if h.lower().startswith("content-length")
                ),
                0,
            )
            await reader.readexactly(length)
            method, target = line.split(" ")[:2]
            status, body, extra = "200 OK", b"{}", ""
            if method == "DELETE":
                status, body = "204 No Content", b""
            elif method == "PATCH":
                status, extra = "202 Accepted", "Location: /vnflcm/v2/vnf_lcm_op_occs/occ-1\r\n"
            elif target.startswith("/vnfpkgm/v1/vnf_packages?"):
                body = json.dumps(self.packages).encode()
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        finally:
            writer.close()

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def raw() -> AsyncIterator[RawServer]:
    async with RawServer() as server:
        yield server


def _settings(url: str) -> TackerSettings:
    return TackerSettings(
        endpoint=url,
        noauth_user_id="u" * 32,
        noauth_project_id="p" * 32,
        retry_attempts=1,
        register_vim=True,
    )


async def test_an_instance_id_cannot_walk_to_the_vims(raw: RawServer) -> None:
    async with TackerClient(_settings(raw.url)) as client:
        await client.get_vnf_instance("../../../v1.0/vims")
        await client.get_op_occ("x/../../../v1.0/vims")
        await client.delete_subscription("../vnf_instances/victim")
        await client.patch_vnf_instance("victim?x=#", {"vimConnectionInfo": {}})
    assert raw.lines == [
        "GET /vnflcm/v2/vnf_instances/..%2F..%2F..%2Fv1.0%2Fvims HTTP/1.1",
        "GET /vnflcm/v2/vnf_lcm_op_occs/x%2F..%2F..%2F..%2Fv1.0%2Fvims HTTP/1.1",
        "DELETE /vnflcm/v2/subscriptions/..%2Fvnf_instances%2Fvictim HTTP/1.1",
        "PATCH /vnflcm/v2/vnf_instances/victim%3Fx=%23 HTTP/1.1",  # "=" may stay in a path
    ]


@pytest.mark.parametrize("bad", ["..", ".", ""])
async def test_a_dot_segment_is_never_sent(raw: RawServer, bad: str) -> None:
    async with TackerClient(_settings(raw.url)) as client:
        with pytest.raises(TackerRejected, match="cannot name a Tacker resource"):
            await client.get_vnf_instance(bad)
        with pytest.raises(TackerRejected):
            await client.get_op_occ(bad)
    assert raw.lines == []  # neither ``vnf_instances/`` (the list) nor ``vnflcm/v2/``


async def test_ids_from_tacker_answers_are_escaped_too(raw: RawServer) -> None:
    # A package id as Tacker lists it goes into the content URL as one segment.
    raw.packages = [{"id": "../../vnflcm/v2/vnf_instances/x", "onboardingState": "ONBOARDED"}]
    async with TackerClient(_settings(raw.url)) as client:
        await client.vnf_package("vnfd-1", io.BytesIO())
        with pytest.raises(TackerRejected, match="cannot be filtered on"):
            await client.vnf_package("vnfd-1);(neq,id,x", io.BytesIO())
    assert raw.lines[-1] == (
        "GET /vnfpkgm/v1/vnf_packages/..%2F..%2Fvnflcm%2Fv2%2Fvnf_instances%2Fx/package_content "
        "HTTP/1.1"
    )
    assert len(raw.lines) == 2  # the refused filter was never sent
