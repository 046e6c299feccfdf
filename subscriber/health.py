"""Liveness and readiness: ``GET /healthz`` and ``GET /readyz``.

* ``/healthz``: the process and its event loop answer. Nothing else is
  looked at, so a slow database never gets a live process restarted.
* ``/readyz``: the store (if the process has one) is reachable and its schema is
  at the head revision, plus every check other components registered (Kafka consumer
  assigned when enabled, subscription present when managed ...). 200 when all
  pass, 503 otherwise, with each check's result in the body.

Both are cheap: check results are reused for ``cache_ttl`` seconds, and each
check has ``check_timeout`` to answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from subscriber.store import Store
from subscriber.store.migrate import HEAD_REVISION, current_revision

__all__ = ["CheckResult", "Health", "ReadinessCheck"]


@dataclass(frozen=True, slots=True)
class CheckResult:
    ok: bool
    detail: str = ""


ReadinessCheck = Callable[[], Awaitable[CheckResult]]


class Health:
    """The readiness checks of one Service.

    Arguments:
        store: checked as ``store`` (``None``: a process without one, the relay).
        cache_ttl: seconds a readiness answer is reused.
        check_timeout: seconds each check may take before it counts as failed.
    """

    def __init__(
        self, store: Store | None, *, cache_ttl: float = 1.0, check_timeout: float = 2.0
    ) -> None:
        self._checks: dict[str, ReadinessCheck] = {}
        if store is not None:
            self._checks["store"] = self._store_check
        self._store = store
        self._ttl = cache_ttl
        self._timeout = check_timeout
        self._cached: tuple[float, bool, dict[str, CheckResult]] | None = None
        self._lock = asyncio.Lock()

    def register(self, name: str, check: ReadinessCheck) -> None:
        """Add a readiness check: ``async def check() -> CheckResult``.

        Raises:
            ValueError: ``name`` is already registered.
        """
        if name in self._checks:
            raise ValueError(f"readiness check {name!r} is already registered")
        self._checks[name] = check

    async def _store_check(self) -> CheckResult:
        assert self._store is not None
        current = await current_revision(self._store.db)
        if current != HEAD_REVISION:
            return CheckResult(False, f"schema at {current}, expected {HEAD_REVISION}")
        return CheckResult(True)

    async def _run(self, name: str, check: ReadinessCheck) -> CheckResult:
        try:
            return await asyncio.wait_for(check(), self._timeout)
        except TimeoutError:
            return CheckResult(False, f"no answer within {self._timeout:g}s")
        except Exception as exc:
            return CheckResult(False, f"{type(exc).__name__}")

    async def readiness(self) -> tuple[bool, dict[str, CheckResult]]:
        """Every check's result (reused for ``cache_ttl``) and whether all passed."""
        async with self._lock:
            now = time.monotonic()
            if self._cached is not None and now - self._cached[0] < self._ttl:
                return self._cached[1], self._cached[2]
            names = list(self._checks)
            results = await asyncio.gather(*(self._run(n, self._checks[n]) for n in names))
            by_name = dict(zip(names, results, strict=True))
            ready = all(r.ok for r in results)
            self._cached = (time.monotonic(), ready, by_name)
            return ready, by_name

    def invalidate(self) -> None:
        """Forget the cached answer: a change the checks would see (a worker died) shows
        at the next ``/readyz``, not ``cache_ttl`` later."""
        self._cached = None

    async def passing(self) -> dict[str, bool]:
        """Each check's name and whether it passes (``lccn_ready`` in ``/metrics``)."""
        _, results = await self.readiness()
        return {name: result.ok for name, result in results.items()}

    def install(self, app: web.Application, *, readiness: bool = True) -> None:
        """``GET /healthz`` on ``app``, and ``GET /readyz`` unless ``readiness`` is false."""
        app.router.add_route("GET", "/healthz", self._healthz)
        if readiness:
            app.router.add_route("GET", "/readyz", self._readyz)

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        ready, results = await self.readiness()
        body: dict[str, Any] = {
            "status": "ready" if ready else "not ready",
            "checks": {n: {"ok": r.ok, "detail": r.detail} for n, r in results.items()},
        }
        return web.json_response(body, status=200 if ready else 503)
