"""A Tacker on loopback (real HTTP) that answers the write-back calls and can become unreachable.

It serves what the write-back step uses (TACKER.md §4-§5): ``GET`` and
merge-``PATCH`` of ``/vnflcm/v2/vnf_instances/{id}`` (``vimConnectionInfo``
kept per instance, each applied PATCH counted: that count is the side effect),
and ``GET /vnflcm/v2/vnf_lcm_op_occs/{id}`` (MODIFY_INFO, COMPLETED).

Faults: :meth:`trip_after` makes the n-th PATCH the start of an outage (that
PATCH is dropped before it is applied, and so is every request after it:
the connection is aborted with no answer); :meth:`refuse` closes the
listening socket (connections refused); :meth:`restore` serves again on the
same port.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

from aiohttp import web

from tests.conftest import free_port

__all__ = ["FlakyTacker"]

V2 = "/vnflcm/v2"


class FlakyTacker:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.instances: dict[str, dict[str, Any]] = {}
        self.applied: Counter[str] = Counter()  # PATCHes applied, per instance
        self.dropped: Counter[str] = Counter()  # requests aborted, per method
        self.down = False
        self.tripped = asyncio.Event()
        self._trip_at: int | None = None
        app = web.Application()
        app.router.add_get(V2 + "/vnf_instances/{id}", self._get_instance)
        app.router.add_patch(V2 + "/vnf_instances/{id}", self._patch_instance)
        app.router.add_get(V2 + "/vnf_lcm_op_occs/{id}", self._get_op_occ)
        self._runner = web.AppRunner(app, access_log=None)
        self._site: web.TCPSite | None = None

    async def start(self) -> None:
        await self._runner.setup()
        await self._listen()

    async def _listen(self) -> None:
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()

    async def close(self) -> None:
        await self._runner.cleanup()

    def trip_after(self, patches: int) -> None:
        """Go down (drop every request) at the PATCH after ``patches`` applied ones."""
        self._trip_at = patches

    async def refuse(self) -> None:
        """Stop listening: new connections are refused."""
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def restore(self) -> None:
        self.down = False
        if self._site is None:
            await self._listen()

    def _drop(self, request: web.Request) -> web.Response:
        self.dropped[request.method] += 1
        assert request.transport is not None
        request.transport.abort()
        return web.Response(status=500)  # never reaches the client: the connection is gone

    async def _get_instance(self, request: web.Request) -> web.Response:
        if self.down:
            return self._drop(request)
        inst = request.match_info["id"]
        body = {"id": inst, "vimConnectionInfo": self.instances.get(inst, {})}
        return web.json_response(body)

    async def _patch_instance(self, request: web.Request) -> web.Response:
        if self._trip_at is not None and sum(self.applied.values()) >= self._trip_at:
            self._trip_at = None
            self.down = True
            self.tripped.set()
        if self.down:
            return self._drop(request)
        inst = request.match_info["id"]
        patch = await request.json()
        info = self.instances.setdefault(inst, {})
        for key, entry in (patch.get("vimConnectionInfo") or {}).items():
            if entry is None:
                info.pop(key, None)
            else:
                info[key] = entry
        self.applied[inst] += 1
        occ = str(uuid.uuid4())
        return web.Response(
            status=202, headers={"Location": f"{self.url}{V2}/vnf_lcm_op_occs/{occ}"}
        )

    async def _get_op_occ(self, request: web.Request) -> web.Response:
        if self.down:
            return self._drop(request)
        occ = request.match_info["id"]
        return web.json_response(
            {"id": occ, "operation": "MODIFY_INFO", "operationState": "COMPLETED"}
        )
