"""The echo filter: recognise notifications of the MODIFY_INFO op-occs our own PATCHes made.

Tacker runs a MODIFY_INFO op-occ for each write-back and notifies about it
(PROCESSING/START, then COMPLETED/RESULT). Those are our echo: stored with
status ``echo`` and never routed to a handler. An operator's MODIFY_INFO is
handled normally.

The race: Tacker may send PROCESSING (even COMPLETED: v1 casts the PATCH to its
conductor and answers 202 at once) before our PATCH call has returned its 202, and so
before we know the op-occ id. Three things close it:

1. The write-back runs as a step of a job on the instance's lane, and every
   notification of that instance queues on the same lane, so none of them is
   looked at until the step (PATCH, id recorded, wait for COMPLETED) is over.
   Other replicas cannot take the lane while we hold its lease.
2. The status report (``subscriber/status.py``) is sent after its job, outside
   any lane: a MODIFY_INFO of an instance with a PATCH of ours still in flight
   (an intent with no op-occ id yet) waits up to ``echo_confirm_wait`` for the
   202 to be recorded, then reads the ledger again.
3. If the process died between the PATCH and recording the id, the intent
   written *before* the PATCH stays open: a MODIFY_INFO of that instance is
   then checked against Tacker, and is ours if its ``operationParams`` (the
   PATCH body) carry our entry under our key, or our ``lccn`` status, and
   nothing else. It is then recorded, so the next transition of that op-occ
   needs no Tacker call. Tacker 16.0.0's v1 cannot show a MODIFY_INFO op-occ
   (it parses the stored request, a Python dict's text, as JSON and answers
   500), so a v1 notification is not checked: it is handled as an operator's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from schemas import LcmOperationType, Notification, VnfLcmOperationOccurrenceNotification
from schemas.lcm import api_version, operation_params
from subscriber.config import TackerSettings
from subscriber.errors import LccnError
from subscriber.tacker.client import STATUS_KEY, TackerClient
from subscriber.tacker.ports import EchoLedger
from subscriber.vim_connection import entry_id

__all__ = ["EchoFilter", "is_own_patch"]

log = logging.getLogger(__name__)

_CONFIRM_POLL = 0.05


def is_own_patch(operation_params: Any, vnf_instance_id: str, key: str) -> bool:
    """Whether a MODIFY_INFO's request body is exactly one of our write-backs or status
    reports."""
    if not isinstance(operation_params, dict):
        return False
    if set(operation_params) == {"metadata"}:
        metadata = operation_params["metadata"]
        return isinstance(metadata, dict) and set(metadata) == {STATUS_KEY}
    if set(operation_params) - {"vimConnectionInfo"}:
        return False
    vci = operation_params.get("vimConnectionInfo")
    if isinstance(vci, dict):  # v2 map
        return set(vci) == {key}
    if isinstance(vci, list):  # v1 list: the other entries named by id only, then ours
        ours = entry_id(vnf_instance_id, key)
        entries = [e for e in vci if isinstance(e, dict)]
        return (
            len(entries) == len(vci)
            and [e.get("id") for e in entries].count(ours) == 1
            and all(set(e) == {"id"} for e in entries if e.get("id") != ours)
        )
    return False


class EchoFilter:
    """Decides whether a stored notification is our own echo.

    Arguments:
        ledger: our own op-occs and open write-back notes (the service gives
            the store's ``tacker`` part).
        settings: the ``tacker`` section (our key, the intent TTL).
        client: to check an op-occ with Tacker when an intent is open; None: table only.
    """

    def __init__(
        self,
        ledger: EchoLedger,
        settings: TackerSettings,
        client: TackerClient | None = None,
    ) -> None:
        self._ledger = ledger
        self._settings = settings
        self._client = client

    async def is_echo(self, notification: Notification) -> bool:
        """True for a notification of one of our MODIFY_INFO op-occs."""
        if not isinstance(notification, VnfLcmOperationOccurrenceNotification):
            return False
        if notification.operation is not LcmOperationType.MODIFY_INFO:
            return False
        occ_id = notification.vnfLcmOpOccId
        if await self._ledger.is_own(occ_id):
            return True
        if self._client is None:
            return False
        since = time.time() - self._settings.echo_intent_ttl
        settled = await self._settled(occ_id, notification.vnfInstanceId, since)
        if settled is not None:
            return settled
        if api_version(notification) == "v1":
            log.warning(
                "a MODIFY_INFO of an instance with a PATCH of ours unanswered; Tacker's v1 "
                "cannot show it, so it is handled as an operator's",
                extra={"vnfLcmOpOccId": occ_id},
            )
            return False
        try:
            occ = await self._client.get_op_occ(occ_id, api=api_version(notification))
        except LccnError as exc:
            # Unknown: handle it as an operator's MODIFY_INFO (routed, usually ignored).
            log.warning(
                "echo check with Tacker failed",
                extra={"vnfLcmOpOccId": occ_id, "error": exc.message},
            )
            return False
        if is_own_patch(operation_params(occ), notification.vnfInstanceId, self._settings.vim_key):
            await self._ledger.record_own(notification.vnfInstanceId, occ_id)
            return True
        return False

    async def _settled(self, occ_id: str, vnf_instance_id: str, since: float) -> bool | None:
        """Whether ``occ_id`` is ours once our PATCHes of the instance in flight got their
        202 (up to ``echo_confirm_wait``); None: one is still unanswered."""
        deadline = time.monotonic() + self._settings.echo_confirm_wait
        while await self._ledger.open_intents(vnf_instance_id, since):
            if await self._ledger.is_own(occ_id):
                return True
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(_CONFIRM_POLL)
        return await self._ledger.is_own(occ_id)
