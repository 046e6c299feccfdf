"""Our LCCN subscription: build the request, create it once, keep it present.

Idempotent by ``callbackUri``: Tacker v2 has no duplicate check (v1 answers
303), so we list first and create only when no subscription calls us back.
Tacker tests the callback with a GET (20 s timeout) while creating it; ingest
answers that independently of any running job.

Authenticated by default. The subscription we create carries the settings'
credentials (``auth.basic`` / ``auth.oauth2`` / ``auth.mtls``) or, when they
name none, credentials generated for it (``auth.generate``: BASIC or
OAUTH2_CLIENT_CREDENTIALS); the store records what checks them (see
:mod:`subscriber.store.credentials`). Tacker never shows a subscription's
``authentication``, so an existing subscription to our callbackUri counts as
ours only when the store says it was made with the credentials wanted now.
One that we cannot confirm (made by hand, by a version without callback auth,
or with credentials since changed in the settings) would have its
notifications refused: it is *replaced*, the new one created first and the
old one deleted after (v1 refuses a second subscription to the same URI, so
there the old one goes first and the reconciler covers the moment between).
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from dataclasses import dataclass
from typing import Any

from schemas.callback_credentials import StoredCredential
from subscriber.config import Settings
from subscriber.errors import LccnError
from subscriber.health import CheckResult
from subscriber.ingest.auth import generated_authentication, subscription_authentication
from subscriber.ingest.credentials import (
    fingerprint_matches,
    new_credential,
    settings_fingerprint,
)
from subscriber.lifecycle import Component
from subscriber.tacker.client import TackerClient
from subscriber.tacker.ports import CredentialLedger

__all__ = [
    "EnsureResult",
    "SubscriptionKeeper",
    "callback_uri",
    "ensure_subscription",
    "subscription_request",
]

log = logging.getLogger(__name__)

# A record bound to a subscription Tacker no longer lists is forgotten only when it is
# older than this before the list was read (another replica may have just made it).
_FORGET_AFTER = 120.0
# A record whose request never got Tacker's answer (a crash mid-way) goes after this.
_UNBOUND_TTL = 600.0


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
    """The ``LccnSubscriptionRequest`` our config asks for, with the settings' own callback
    credentials when they name some (it then holds secrets); generated credentials are
    added by :func:`ensure_subscription`."""
    t = settings.tacker
    uri = callback_uri(settings)
    body: dict[str, Any] = {"callbackUri": uri}
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
    auth = subscription_authentication(settings, uri)
    if auth is not None:
        body["authentication"] = auth
    return body


@dataclass(frozen=True, slots=True)
class EnsureResult:
    """What :func:`ensure_subscription` found or did.

    Attributes:
        subscription: as Tacker shows it (no secrets).
        created: made now.
        filter_differs: an existing one has another filter than the configured one.
        replaced: ids of subscriptions to our callbackUri whose authentication could
            not be confirmed, deleted for the new one.
        auth: which credentials it carries (``BASIC (generated)``, ``settings``, ``none``,
            ``unknown``); never a secret.
    """

    subscription: dict[str, Any]
    created: bool
    filter_differs: bool = False
    replaced: tuple[str, ...] = ()
    auth: str = ""


def _describe(record: StoredCredential | None) -> str:
    if record is None:
        return "unknown"
    return "settings" if record.kind == "SETTINGS" else f"{record.kind} (generated)"


async def _confirmed(
    record: StoredCredential | None,
    settings: Settings,
    block: dict[str, Any] | None,
) -> bool:
    """Whether a subscription recorded as ``record`` carries the credentials wanted now."""
    if record is None:
        return False
    if block is not None:
        return record.kind == "SETTINGS" and await asyncio.to_thread(
            fingerprint_matches, record.verifier, block
        )
    return record.kind == _generated_kind(settings)


def _generated_kind(settings: Settings) -> str:
    return "BASIC" if settings.auth.generate == "basic" else "OAUTH2_CLIENT_CREDENTIALS"


async def _forget_stale(
    ledger: CredentialLedger,
    records: list[StoredCredential],
    listed: list[dict[str, Any]],
    listed_at: float,
    api: str,
) -> None:
    """Forget the records of subscriptions Tacker no longer has, and of requests that never
    got an answer: their credentials are refused from then on."""
    present = {str(s.get("id")) for s in listed}
    stale = [
        r.id
        for r in records
        if r.api == api
        and (
            (r.subscription_id is None and r.created_at < listed_at - _UNBOUND_TTL)
            or (
                r.subscription_id is not None
                and r.subscription_id not in present
                and r.created_at < listed_at - _FORGET_AFTER
            )
        )
    ]
    if stale:
        await ledger.forget(stale)
        log.info(
            "forgot the callback credentials of deleted subscriptions", extra={"n": len(stale)}
        )


async def _create(
    client: TackerClient,
    settings: Settings,
    ledger: CredentialLedger,
    wanted: dict[str, Any],
) -> tuple[dict[str, Any], str]:
    """POST our subscription with its credentials recorded; (subscription, auth)."""
    uri, api = wanted["callbackUri"], settings.tacker.api_version
    block = wanted.get("authentication")
    if block is not None:
        fingerprint = await asyncio.to_thread(settings_fingerprint, block)
        created = await client.create_subscription(wanted)
        await ledger.add(
            StoredCredential(
                id=secrets.token_hex(6),
                kind="SETTINGS",
                principal="",
                verifier=fingerprint,
                callback_uri=uri,
                api=api,
                subscription_id=str(created["id"]),
                created_at=time.time(),
            )
        )
        return created, "settings"
    if settings.auth.generate == "off":
        return await client.create_subscription(wanted), "none"
    record, secret = new_credential(
        "BASIC" if settings.auth.generate == "basic" else "OAUTH2_CLIENT_CREDENTIALS", uri, api
    )
    # Recorded (committed) first: Tacker's test GET arrives while it handles the POST.
    await ledger.add(record)
    body = {**wanted, "authentication": generated_authentication(settings, record, secret)}
    try:
        created = await client.create_subscription(body)
    except BaseException:
        await asyncio.shield(ledger.forget([record.id]))
        raise
    await ledger.bind(record.id, str(created["id"]))
    return created, _describe(record)


async def ensure_subscription(
    client: TackerClient, settings: Settings, ledger: CredentialLedger
) -> EnsureResult:
    """Keep one subscription to our callbackUri, carrying credentials ``serve`` accepts.

    An existing one is kept when ``ledger`` confirms its credentials are the wanted
    ones (with ``auth.generate: off`` and no credentials in the settings, any existing
    one is kept); otherwise a new one is created and the unconfirmed ones deleted.

    Arguments:
        client: the Tacker client.
        settings: the whole configuration (callback, ``auth``, ``tacker``).
        ledger: where the credentials of our subscriptions are recorded.

    Returns:
        the subscription (as Tacker shows it: no secrets) and what was done.

    Raises:
        LccnError: Tacker or the store could not be asked (nothing half-done is kept).
    """
    wanted = subscription_request(settings)
    uri, api = wanted["callbackUri"], settings.tacker.api_version
    block = wanted.get("authentication")
    listed_at = time.time()
    listed = await client.list_subscriptions()
    records = await ledger.all()
    await _forget_stale(ledger, records, listed, listed_at, api)
    by_sub = {r.subscription_id: r for r in records if r.subscription_id and r.api == api}
    ours = [s for s in listed if s.get("callbackUri") == uri]
    keep_any = block is None and settings.auth.generate == "off"
    for sub in ours:
        record = by_sub.get(str(sub.get("id")))
        if keep_any or await _confirmed(record, settings, block):
            differs = (sub.get("filter") or {}) != (wanted.get("filter") or {})
            if differs:
                log.warning(
                    "our subscription exists with another filter; delete it to change it",
                    extra={"subscription_id": sub.get("id")},
                )
            return EnsureResult(sub, False, differs, auth=_describe(record))
    unconfirmed = tuple(str(s.get("id")) for s in ours)
    if unconfirmed and api == "v1":
        for sub_id in unconfirmed:  # v1 answers 303 to a second subscription to one URI
            await client.delete_subscription(sub_id)
    created, auth = await _create(client, settings, ledger, wanted)
    if unconfirmed and api == "v2":
        for sub_id in unconfirmed:
            await client.delete_subscription(sub_id)
    if unconfirmed:
        log.warning(
            "replaced subscriptions to our callback whose authentication could not be confirmed",
            extra={"replaced": list(unconfirmed), "subscription_id": created.get("id")},
        )
    log.info(
        "subscribed to Tacker",
        extra={"subscription_id": created.get("id"), "callbackUri": uri, "auth": auth},
    )
    return EnsureResult(created, True, replaced=unconfirmed, auth=auth)


class SubscriptionKeeper(Component):
    """``tacker.subscribe_on_start``: ensures the subscription in the background, then
    watches that it stays present (readiness check "subscription").

    Tacker may be down when we start; the keeper retries with backoff instead
    of failing the service, and readiness says why it is not ready. A crash of
    its loop (a bug) shows in readiness too, and the loop is restarted.
    """

    def __init__(
        self,
        client: TackerClient,
        settings: Settings,
        ledger: CredentialLedger,
        *,
        check_interval: float = 30.0,
    ) -> None:
        super().__init__()
        self._client = client
        self._settings = settings
        self._ledger = ledger
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
                    result = await ensure_subscription(self._client, self._settings, self._ledger)
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
