"""How our last job on a VNF instance went, where operators look: an ``lccn`` entry in the
instance's ``metadata`` (``openstack vnflcm show``).

Without Tacker's hooks (a package that does not wire them, the v1 API) Tacker says
COMPLETED before our job runs, so its op-occ cannot tell whether the cluster was built.
After the job of such a COMPLETED ends, done or failed, the reporter PATCHes::

    metadata: {lccn: {state: done|failed, operation, opOccId, reason, at, eventId}}

(v1 keeps ``metadata`` as strings: there the entry is that map as one line of JSON.)

A job a hook ran needs none: Tacker's op-occ itself says how it went. The PATCH is a
MODIFY_INFO op-occ of ours (recorded as our echo before it leaves, like the write-back);
one that meets another operation (409) is tried again for ``status_report_timeout``.
Reports are kept in memory, the newest per instance; the store keeps the whole truth
(``lccn-subscriber events show``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from schemas import LcmOperationStateType
from subscriber.config import TackerSettings
from subscriber.errors import LccnError, TackerConflict, TackerUnavailable
from subscriber.kernel import Handler
from subscriber.kernel.ports import ApiVersion
from subscriber.lifecycle import Component
from subscriber.redact import redact_text
from subscriber.runner import JobOutcome
from subscriber.store import EventRow
from subscriber.tacker.client import TackerClient

__all__ = ["StatusReporter", "status_entry"]

log = logging.getLogger(__name__)

_REASON_MAX = 400


def status_entry(event: EventRow, outcome: JobOutcome, reason: str | None) -> dict[str, Any]:
    """The ``lccn`` entry for the job of ``event`` (no secret; a reason of one line)."""
    line = " ".join(redact_text(reason).split()) if reason else None
    if line and len(line) > _REASON_MAX:
        line = line[: _REASON_MAX - 3] + "..."
    return {
        "state": "done" if outcome is JobOutcome.DONE else "failed",
        "operation": event.operation,
        "opOccId": event.vnf_lcm_op_occ_id,
        "reason": line,
        "at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "eventId": event.id,
    }


def _api(event: EventRow) -> ApiVersion:
    return "v1" if "/vnflcm/v1/" in event.body else "v2"


class StatusReporter(Component):
    """Sends the ``lccn`` status entry of each settled notification-driven cluster job.

    Arguments:
        client: a started Tacker client.
        settings: the ``tacker`` section.
        reports: which handlers' jobs are reported (the cluster handlers).
    """

    def __init__(
        self,
        client: TackerClient,
        settings: TackerSettings,
        *,
        reports: Callable[[Handler], bool],
    ) -> None:
        super().__init__()
        self._client = client
        self._settings = settings
        self._reports = reports
        self._pending: dict[str, tuple[ApiVersion, dict[str, Any], float]] = {}
        self._wake = asyncio.Event()
        self.sent = 0

    async def _start(self) -> None:
        self._spawn("tacker-status", self._loop, restart=True)

    @property
    def pending(self) -> int:
        """How many instances' entries wait to be sent."""
        return len(self._pending)

    # -- JobObserver ------------------------------------------------------------------

    def job_settled(
        self,
        event: EventRow,
        handler: Handler,
        outcome: JobOutcome,
        *,
        reason: str | None = None,
        ended_early: bool = False,
    ) -> None:
        if (
            event.source == "hook"
            or event.operation_state != LcmOperationStateType.COMPLETED
            or not event.vnf_instance_id
            or not self._reports(handler)
            or (outcome is JobOutcome.DONE and ended_early)
        ):
            return
        entry = status_entry(event, outcome, reason)
        deadline = time.monotonic() + self._settings.status_report_timeout
        self._pending[event.vnf_instance_id] = (_api(event), entry, deadline)
        self._wake.set()

    # -- the sender -------------------------------------------------------------------

    async def _loop(self) -> None:
        delay = self._settings.retry_initial
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            instance, (api, entry, deadline) = next(iter(self._pending.items()))
            try:
                await self._client.report_status(instance, entry, api=api)
            except (TackerConflict, TackerUnavailable) as exc:
                if time.monotonic() < deadline:
                    # Busy (another operation holds the instance) or down: later, in turn.
                    self._requeue(instance)
                    await asyncio.sleep(delay)
                    delay = min(self._settings.retry_max * 4, delay * 2)
                    continue
                log.warning(
                    "lccn status not reported",
                    extra={"vnfInstanceId": instance, "error": exc.message},
                )
            except LccnError as exc:  # refused (the instance is gone ...): nothing to retry
                log.warning(
                    "lccn status not reported",
                    extra={"vnfInstanceId": instance, "error": exc.message},
                )
            else:
                self.sent += 1
                log.info(
                    "lccn status reported",
                    extra={"vnfInstanceId": instance, "state": entry["state"]},
                )
            delay = self._settings.retry_initial
            if self._pending.get(instance, (None, None))[1] is entry:
                del self._pending[instance]

    def _requeue(self, instance: str) -> None:
        """Behind the others: a busy instance does not hold back the rest."""
        self._pending[instance] = self._pending.pop(instance)
