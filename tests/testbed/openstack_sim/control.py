"""A synchronous client for the simulator's ``/_sim`` control API (faults, state, calls).

Synchronous on purpose: the Tacker tests and ``scripts/demo.py`` drive everything over
plain HTTP from one thread, and this must not depend on whose event loop is running.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["SimControl"]


class SimControl:
    """Arguments: url: the simulator's base URL (``http://127.0.0.1:PORT``)."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.url}/_sim/{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def health(self) -> dict[str, Any]:
        return self._call("GET", "health")  # type: ignore[no-any-return]

    def add_fault(
        self,
        *,
        service: str = "*",
        method: str = "*",
        path: str = ".*",
        status: int | None = 500,
        delay: float = 0.0,
        times: int = 1,
        stack_failure: str | None = None,
    ) -> dict[str, Any]:
        """Inject one fault; returns it (with its ``id``).

        Arguments:
            service: ``identity``, ``orchestration``, ``image``, ``compute`` or ``*``.
            method: HTTP method or ``*``.
            path: regex searched in the path after the service prefix, e.g. ``/stacks$``.
            status: status code to answer with (None: only delay, or ``stack_failure``).
            delay: seconds to wait before answering.
            times: how many matching calls it hits; 0 = until cleared.
            stack_failure: accept a stack create/update and leave it ``*_FAILED``
                with this reason.
        """
        return self._call(
            "POST",
            "faults",
            {  # type: ignore[no-any-return]
                "service": service,
                "method": method,
                "path": path,
                "status": status,
                "delay": delay,
                "times": times,
                "stack_failure": stack_failure,
            },
        )

    def faults(self) -> list[dict[str, Any]]:
        return self._call("GET", "faults")  # type: ignore[no-any-return]

    def clear_faults(self) -> None:
        self._call("DELETE", "faults")

    @contextmanager
    def fault(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """``with ctl.fault(service="orchestration", ...):`` injects, then clears all."""
        fault = self.add_fault(**kwargs)
        try:
            yield fault
        finally:
            self.clear_faults()

    def state(self) -> dict[str, Any]:
        return self._call("GET", "state")  # type: ignore[no-any-return]

    def calls(self) -> list[dict[str, Any]]:
        return self._call("GET", "calls")  # type: ignore[no-any-return]

    def clear_calls(self) -> None:
        self._call("DELETE", "calls")
