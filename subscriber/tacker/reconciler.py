"""The reconciler: recover transitions Tacker notified while we could not hear them.

Tacker sends each notification once (v2: one try, no resend). Every
``reconcile_interval`` seconds the reconciler lists the op-occs whose state
changed since a persisted watermark (``kv`` row ``reconcile.watermark``, the
newest ``stateEnteredTime`` seen, re-read with ``reconcile_overlap``) and
appends each as an event with source ``reconcile``. The dedup key (op-occ,
state, status) makes this safe: a transition already received is a duplicate.

An op-occ only shows its *current* state, so:

* the current state is appended as a normal ``pending`` event, built like the
  notification Tacker would have sent (notificationStatus per Tacker's rules,
  FULL content from the op-occ's ``resourceChanges``/``changedInfo``/``error``);
* the states it must have passed through (STARTING, and PROCESSING before
  COMPLETED/FAILED_TEMP/FAILED/ROLLING_BACK; MODIFY_INFO starts at PROCESSING)
  are recorded too, so the history is complete, but with status ``stale``:
  running a "start" hook after the operation has finished would act on a
  cloud that has already changed (a scale-in's VMs are gone), so they are not
  run. Transitions it cannot infer (a FAILED_TEMP that a retry then
  overwrote) are not invented.

The first run with no watermark starts from "now", and no pass reads before that
moment (``kv`` row ``reconcile.floor``): history before this service ever ran
against its store is not replayed, whatever ``reconcile_overlap`` says.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid
from typing import Any

from schemas import NotificationParseError, parse_notification_data
from schemas.ids import is_resource_id
from subscriber.config import TackerSettings
from subscriber.errors import LccnError, TackerRejected
from subscriber.ingest.traced import append_traced
from subscriber.lifecycle import Component
from subscriber.store import EventStatus, NewEvent, Store
from subscriber.tacker.client import TackerClient

__all__ = ["Reconciler", "implied_states", "synthesise"]

log = logging.getLogger(__name__)

WATERMARK_KEY = "reconcile.watermark"
FLOOR_KEY = "reconcile.floor"
_OP_OCC_TYPE = "VnfLcmOperationOccurrenceNotification"
_AFTER_PROCESSING = {"COMPLETED", "FAILED_TEMP", "FAILED", "ROLLING_BACK"}


def notification_status(operation: str, state: str, api: str) -> str:
    """START or RESULT, as Tacker sets it (TACKER.md §2 for v2, §3 for v1)."""
    if api == "v1":
        return "START" if state in ("STARTING", "PROCESSING", "ROLLING_BACK") else "RESULT"
    if state == "STARTING" or (operation == "MODIFY_INFO" and state == "PROCESSING"):
        return "START"
    return "RESULT"


def implied_states(operation: str, state: str) -> list[str]:
    """States an op-occ in ``state`` must have been in before (oldest first)."""
    before: list[str] = []
    if operation != "MODIFY_INFO" and state != "STARTING":
        before.append("STARTING")
    if state in _AFTER_PROCESSING:
        before.append("PROCESSING")
    return before


def _parse_time(text: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _format_time(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _format_exact(value: dt.datetime) -> str:
    """To the microsecond, as Tacker's ``stateEnteredTime`` is: the floor, truncated to
    the second, would let in what ended up to a second before the first start."""
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def synthesise(
    occ: dict[str, Any], state: str, *, api: str, subscription_id: str, current: bool
) -> dict[str, Any]:
    """The notification body Tacker would have sent for ``occ`` entering ``state``."""
    operation = str(occ["operation"])
    inst = str(occ["vnfInstanceId"])
    links = occ.get("_links") or {}
    self_href = (links.get("self") or {}).get("href", f"vnf_lcm_op_occs/{occ['id']}")
    inst_href = (links.get("vnfInstance") or {}).get("href", f"vnf_instances/{inst}")
    body: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "notificationType": _OP_OCC_TYPE,
        "subscriptionId": subscription_id,
        "timeStamp": occ.get("stateEnteredTime") or _format_time(dt.datetime.now(dt.UTC)),
        "notificationStatus": notification_status(operation, state, api),
        "operationState": state,
        "vnfInstanceId": inst,
        "operation": operation,
        "isAutomaticInvocation": bool(occ.get("isAutomaticInvocation", False)),
        "vnfLcmOpOccId": str(occ["id"]),
        "_links": {
            "vnfInstance": {"href": inst_href},
            "subscription": {"href": f"subscriptions/{subscription_id}"},
            "vnfLcmOpOcc": {"href": self_href},
        },
    }
    if current and state != "STARTING":
        changes = occ.get("resourceChanges") or {}
        for src, dst in (
            ("affectedVnfcs", "affectedVnfcs"),
            ("affectedVirtualLinks", "affectedVirtualLinks"),
            ("affectedExtLinkPorts", "affectedExtLinkPorts"),
            ("affectedVirtualStorages", "affectedVirtualStorages"),
        ):
            if changes.get(src):
                body[dst] = changes[src]
        for key in ("changedInfo", "changedExtConnectivity"):
            if occ.get(key):
                body[key] = occ[key]
        if state in ("FAILED_TEMP", "FAILED", "ROLLED_BACK") and occ.get("error"):
            body["error"] = occ["error"]
        body["verbosity"] = "FULL"
    return body


def _well_formed(occ: dict[str, Any]) -> bool:
    """Whether the op-occ's own id and its instance's would pass ingest's id check."""
    return is_resource_id(occ.get("id")) and is_resource_id(occ.get("vnfInstanceId"))


class Reconciler(Component):
    """Polls Tacker's op-occs and appends the transitions we never received.

    Its loop survives failed passes (logged, retried next interval); should the
    loop itself crash, it is restarted.

    Arguments:
        store: the event store and the watermark.
        client: a started Tacker client.
        settings: the ``tacker`` section (interval, overlap, filters, API).
        subscription_id: put into synthetic notifications (a callable: known later).
    """

    def __init__(
        self,
        store: Store,
        client: TackerClient,
        settings: TackerSettings,
        *,
        subscription_id: Any = None,
    ) -> None:
        super().__init__()
        self._store = store
        self._client = client
        self._settings = settings
        self._subscription_id = subscription_id
        self._server_filter = True
        self.runs = 0
        self.appended = 0

    async def _start(self) -> None:
        if await self._store.tacker.get_value(WATERMARK_KEY) is None:
            now = dt.datetime.now(dt.UTC)
            await self._store.tacker.set_value(FLOOR_KEY, _format_exact(now))
            await self._store.tacker.set_value(WATERMARK_KEY, _format_time(now))
        self._spawn("tacker-reconciler", self._loop, restart=True)

    async def _loop(self) -> None:
        while True:
            try:
                await self.reconcile_once()
            except LccnError as exc:
                log.warning("reconcile pass failed", extra={"error": exc.message})
            await asyncio.sleep(self._settings.reconcile_interval)

    def _sub_id(self) -> str:
        value = self._subscription_id() if callable(self._subscription_id) else None
        return str(value or "reconciled")

    async def _list_since(self, since: str) -> list[dict[str, Any]]:
        if self._server_filter:
            try:
                return await self._client.list_op_occs(f"(gte,stateEnteredTime,{since})")
            except TackerRejected:
                # This Tacker cannot filter on it: list all and filter here.
                self._server_filter = False
        return await self._client.list_op_occs()

    async def reconcile_once(self) -> int:
        """One pass; returns how many transitions were new to the store."""
        mark_text = await self._store.tacker.get_value(WATERMARK_KEY)
        mark = _parse_time(mark_text) if mark_text else dt.datetime.now(dt.UTC)
        since = mark - dt.timedelta(seconds=self._settings.reconcile_overlap)
        floor_text = await self._store.tacker.get_value(FLOOR_KEY)
        if floor_text:
            since = max(since, _parse_time(floor_text))
        occs = [
            o
            for o in await self._list_since(_format_time(since))
            if o.get("stateEnteredTime") and _parse_time(o["stateEnteredTime"]) >= since
        ]
        new = 0
        newest = mark
        api, sub = self._settings.api_version, self._sub_id()
        types, states = self._settings.operation_types, self._settings.operation_states
        for occ in sorted(occs, key=lambda o: _parse_time(o["stateEnteredTime"])):
            newest = max(newest, _parse_time(occ["stateEnteredTime"]))
            operation, state = str(occ.get("operation")), str(occ.get("operationState"))
            if types and operation not in types:
                continue
            if not _well_formed(occ):
                # Skipped, not raised: a failed pass would hold the watermark here forever.
                log.warning(
                    "reconcile: skipped an op-occ whose ids are not ids (schemas.ids)",
                    extra={"operation": operation, "operationState": state},
                )
                continue
            if not states or state in states:
                body = synthesise(occ, state, api=api, subscription_id=sub, current=True)
                # The transition this service may run: its trace starts here (the
                # implied ones below are never run).
                result = await append_traced(self._store.events.append, self._new_event(body))
                if not result.duplicate:
                    new += 1
                    log.info(
                        "reconciled a missed transition",
                        extra={
                            "event_id": result.event_id,
                            "vnfInstanceId": occ.get("vnfInstanceId"),
                            "vnfLcmOpOccId": occ.get("id"),
                            "operation": operation,
                            "operationState": state,
                        },
                    )
            # After the current state, so that an implied PROCESSING joins the
            # attempt the current state opened (a retry's), not the first one.
            for past in implied_states(operation, state):
                if states and past not in states:
                    continue
                body = synthesise(occ, past, api=api, subscription_id=sub, current=False)
                recorded = await self._store.events.append_recorded(
                    self._new_event(body),
                    EventStatus.STALE,
                    "reconciled: implied by a later state of its op-occ; not run",
                )
                new += not recorded.duplicate
        if newest > mark:
            await self._store.tacker.set_value(WATERMARK_KEY, _format_time(newest))
        self.runs += 1
        self.appended += new
        return new

    def _new_event(self, body: dict[str, Any]) -> NewEvent:
        try:
            notification = parse_notification_data(body)
        except NotificationParseError as exc:  # a bug in synthesise, or an odd op-occ
            raise LccnError(f"cannot synthesise a notification: {exc.detail}") from exc
        return NewEvent(
            source="reconcile",
            notification=notification,
            body=body,
            api_version="2.0.0" if self._settings.api_version == "v2" else "1.3.0",
            meta={"reconciled": True},
        )
