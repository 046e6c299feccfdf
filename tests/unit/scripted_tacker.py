"""A small aiohttp server that answers like Tacker from a script (TACKER.md §4-§5), for the
unit tests of the Tacker client (the ``fake`` fixture)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.loopback import listen


class ScriptedTacker:
    """Answers each (method, path) from a script of statuses; records every request."""

    def __init__(self) -> None:
        self.script: dict[tuple[str, str], list[Any]] = {}
        self.seen: list[tuple[str, str, dict[str, str], Any]] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner: web.AppRunner | None = None
        self.url = ""

    def on(self, method: str, path: str, *answers: Any) -> None:
        """Each answer: a status (empty body), (status, json), or (status, json, headers)."""
        self.script[(method, path)] = list(answers)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.seen.append((request.method, request.path, dict(request.headers), body))
        answers = self.script.get((request.method, request.path))
        if not answers:
            return web.json_response({"status": 404, "detail": "not scripted"}, status=404)
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, int):
            answer = (answer, None)
        status, data, *rest = answer
        headers = rest[0] if rest else {}
        if data is None:
            return web.Response(status=status, headers=headers)
        return web.json_response(data, status=status, headers=headers)

    async def start(self) -> None:
        self.runner = web.AppRunner(self.app)
        self.url = await listen(self.runner)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
