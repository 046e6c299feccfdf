"""Our LCCN subscription: build the request, create it once, keep it present.

Idempotent by ``callbackUri``: Tacker v2 has no duplicate check (v1 answers
303), so we list first and create only when no subscription calls us back.
Tacker tests the callback with a GET (20 s timeout) while creating it; ingest
answers that independently of any running job.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import Any

from subscriber.config import Settings
from subscriber.errors import LccnError
from subscriber.health import CheckResult
from subscriber.ingest.auth import subscription_authentication
from subscriber.lifecycle import Component
from subscriber.tacker.client import TackerClient

__all__ = [
    "EnsureResult",
    "SubscriptionKeeper",
    "callback_uri",
    "ensure_subscription",
    "subscription_request",
]

log = logging.getLogger(__name__)


def callback_uri(settings: Settings) -> str:
    """``tacker.callback_uri``, or this listener's URL when it listens on a concrete address."""
    if settings.tacker.callback_uri:
        return settings.tacker.callback_uri
    host = settings.http.host
    if host in ("0.0.0.0", "::", ""):
        raise LccnError(
            "tacker.callback_uri is required when http.host is a wildcard address "
            "(Tacker must be told where to call back)"
        )
    scheme = "https" if settings.auth.mtls.enabled else "http"
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{settings.http.port}{settings.http.path}"


def subscription_request(settings: Settings) -> dict[str, Any]:
    """The ``LccnSubscriptionRequest`` our config asks for (it holds callback secrets)."""
    t = settings.tacker
    body: dict[str, Any] = {"callbackUri": callback_uri(settings)}
    flt: dict[str, Any] = {}
    if t.operation_types or t.operation_states:
        flt["notificationTypes"] = ["VnfLcmOperationOccurrenceNotification"]
    if t.operation_types:
        flt["operationTypes"] = list(t.operation_types)
    if t.operation_states:
        flt["operationStates"] = list(t.operation_states)
    if flt:
        body["filter"] = flt
    if t.api_version == "v2":
        body["verbosity"] = t.verbosity
    auth = subscription_authentication(settings)
    if auth is not None:
        body["authentication"] = auth
    return body


@dataclass(frozen=True, slots=True)
class EnsureResult:
    subscription: dict[str, Any]
    created: bool
    filter_differs: bool = False


async def ensure_subscription(client: TackerClient, settings: Settings) -> EnsureResult:
    """Create our subscription unless one with our callbackUri exists.

    Returns:
        the subscription (as Tacker shows it: no secrets), whether it was
        created now, and whether an existing one has a different filter.
    """
    wanted = subscription_request(settings)
    for sub in await client.list_subscriptions():
        if sub.get("callbackUri") == wanted["callbackUri"]:
            differs = (sub.get("filter") or {}) != (wanted.get("filter") or {})
            if differs:
                log.warning(
                    "our subscription exists with another filter; delete it to change it",
                    extra={"subscription_id": sub.get("id")},
                )
            return EnsureResult(sub, False, differs)
    created = await client.create_subscription(wanted)
    log.info(
        "subscribed to Tacker",
        extra={"subscription_id": created.get("id"), "callbackUri": wanted["callbackUri"]},
    )
    return EnsureResult(created, True)


class SubscriptionKeeper(Component):
    """``tacker.subscribe_on_start``: ensures the subscription in the background, then
    watches that it stays present (readiness check "subscription").

    Tacker may be down when we start; the keeper retries with backoff instead
    of failing the service, and readiness says why it is not ready. A crash of
    its loop (a bug) shows in readiness too, and the loop is restarted.
    """

    def __init__(
        self, client: TackerClient, settings: Settings, *, check_interval: float = 30.0
    ) -> None:
        super().__init__()
        self._client = client
        self._settings = settings
        self._interval = check_interval
        self.subscription_id: str | None = None
        self.last_error: str = "not subscribed yet"
        self.subscribed = asyncio.Event()

    async def _start(self) -> None:
        self._spawn("tacker-subscription", self._loop, restart=True)

    def _on_task_error(self, name: str, exc: BaseException) -> None:
        self.last_error = f"subscription keeper died: {exc!r}"

    async def _loop(self) -> None:
        delay = 1.0
        while True:
            try:
                if self.subscription_id is None:
                    result = await ensure_subscription(self._client, self._settings)
                    self.subscription_id = str(result.subscription["id"])
                    self.last_error = ""
                    self.subscribed.set()
                else:
                    present = {str(s.get("id")) for s in await self._client.list_subscriptions()}
                    if self.subscription_id not in present:
                        log.warning(
                            "our subscription disappeared; subscribing again",
                            extra={"subscription_id": self.subscription_id},
                        )
                        self.subscription_id = None
                        self.subscribed.clear()
                        self.last_error = "subscription deleted in Tacker"
                        continue
                delay = 1.0
                await asyncio.sleep(self._interval)
            except LccnError as exc:
                self.last_error = exc.message
                log.warning("cannot ensure the subscription", extra={"error": exc.message})
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(60.0, delay * 2)

    async def readiness(self) -> CheckResult:
        ok = self.subscription_id is not None
        return CheckResult(ok, "" if ok else self.last_error)
