"""The drain hook: a VNF package's ``scale_start``/``heal_start`` script asks us to drain
the nodes Tacker is about to delete, and waits for the answer.

Tacker deletes the VMs of a SCALE_IN or HEAL right after its management-driver
``*_start`` script returns (TACKER.md §1.7), so an outside service hearing the
notifications cannot drain in time on its own. The script (shipped in our sample
package, ``Scripts/lccn_hook.py``) POSTs the Nova server ids of the grant's
``removeResources`` here, then polls ``GET {path}/{vnfLcmOpOccId}`` until the
answer is ``done`` or ``failed``; a non-zero exit fails Tacker's operation.

The answer comes from a checkpointed job, so a restart of ``serve`` loses
nothing: the request is kept in the store (key ``drain:<op-occ>``) and the work
is the op-occ's PROCESSING event, routed to the drain handler. Tacker notifies
PROCESSING just before it runs the script, so that event usually exists
already, and may even have run (with nothing to drain) before the request came:

- no PROCESSING event yet: we append one ourselves (source ``hook``), with the
  same dedup key as Tacker's, so whichever arrives second is the duplicate;
- an event that is waiting or running: its job reads the request when its
  ``drain-request`` step runs; one that ran that step before the request
  came is queued again (replay ``anew``) once it has settled;
- a settled event whose job drained the requested servers: the answer stands;
- a failed one, asked again by a POST: Tacker retries the operation, so we do too.

Both the POST and the GET apply this rule, so a request survives any order of
arrival and any restart in between. Which handler drains is the routing table's
answer for ``(SCALE|HEAL, PROCESSING)``; its typed results
(:class:`~handlers.results.DrainServers`, :class:`~handlers.results.Leaving`)
say what it drained. Auth: ``Authorization: Bearer <hooks.token>``; the route
exists only when a token is configured.
"""

from __future__ import annotations

import datetime as dt
import hmac
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from handlers.results import DrainServers, Leaving
from schemas import LcmOperationStateType, parse_notification_data
from schemas.hooks import DrainRequest, drain_key
from schemas.ids import is_resource_id
from subscriber.config import HookSettings
from subscriber.errors import StoreError, StoreUnavailable
from subscriber.ingest.problems import problem_response
from subscriber.kernel import RoutingTable
from subscriber.redact import redact_text
from subscriber.store import EventRow, EventStatus, NewEvent, StepStatus, Store
from subscriber.store.jobs import JobRow

__all__ = ["DrainAnswer", "DrainHook", "drain_answer"]

log = logging.getLogger(__name__)

_MAX_BODY = 64 * 1024


@dataclass(frozen=True, slots=True)
class DrainAnswer:
    """Where a drain request stands: ``pending``, ``running``, ``done`` or ``failed``."""

    status: str
    op_occ_id: str
    event_id: int | None = None
    nodes: tuple[str, ...] = ()
    detail: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "vnfLcmOpOccId": self.op_occ_id,
            "status": self.status,
            "eventId": self.event_id,
            "nodes": list(self.nodes),
        }
        if self.detail:
            out["detail"] = self.detail
        return out


def _synthesized(request: DrainRequest) -> dict[str, Any]:
    """Tacker's PROCESSING notification of the op-occ, as Tacker v2 would send it."""
    base = "/vnflcm/v2"
    return {
        # A valid notification id whatever the op-occ id's length (schemas.ids).
        "id": f"lccn-hook-{uuid.uuid5(uuid.NAMESPACE_URL, request.vnfLcmOpOccId)}",
        "notificationType": "VnfLcmOperationOccurrenceNotification",
        "subscriptionId": "lccn-hook",
        "timeStamp": dt.datetime.now(dt.UTC).isoformat(),
        "notificationStatus": "RESULT",
        "operationState": "PROCESSING",
        "vnfInstanceId": request.vnfInstanceId,
        "operation": request.operation,
        "isAutomaticInvocation": False,
        "vnfLcmOpOccId": request.vnfLcmOpOccId,
        "_links": {
            "vnfInstance": {"href": f"{base}/vnf_instances/{request.vnfInstanceId}"},
            "subscription": {"href": f"{base}/subscriptions/lccn-hook"},
            "vnfLcmOpOcc": {"href": f"{base}/vnf_lcm_op_occs/{request.vnfLcmOpOccId}"},
        },
    }


def drains(routing: RoutingTable, event: EventRow, job: JobRow | None) -> bool:
    """Whether ``job`` is the drain of ``event``'s operation: its handler is the one the
    routing table gives ``(operation, PROCESSING)``."""
    if job is None or not event.operation:
        return False
    handler = routing.handler_for(event.operation, LcmOperationStateType.PROCESSING)
    return handler is not None and job.handler == handler.name


async def _drained(
    store: Store, routing: RoutingTable, event: EventRow
) -> tuple[bool, set[str], tuple[str, ...]]:
    """Whether the event's current job read the drain request; the servers it took; the
    nodes it selected."""
    job = await store.jobs.current(event.id)
    if job is None or not drains(routing, event, job):
        return False, set(), ()
    results = {
        s.name: s.result_json()
        for s in await store.jobs.steps(job.id)
        if s.status in (StepStatus.DONE, StepStatus.SKIPPED)
    }
    if DrainServers.step not in results:
        return False, set(), ()
    leaving = Leaving.from_json(results.get(Leaving.step))
    return True, set(DrainServers.from_json(results[DrainServers.step]).servers), leaving.nodes


async def drain_answer(
    store: Store, routing: RoutingTable, op_occ_id: str, *, wake: Any = None
) -> DrainAnswer | None:
    """The answer to the op-occ's drain request (``None``: no request), queuing the work
    again when the event that should do it ran before the request came (see above)."""
    raw = await store.tacker.get_value(drain_key(op_occ_id))
    if raw is None:
        return None
    wanted = set(json.loads(raw)["servers"])
    found = await store.events.of_op_occ(op_occ_id, "PROCESSING")
    if not found:
        return DrainAnswer("pending", op_occ_id)
    event = found[0]
    if event.status in EventStatus.OPEN:
        state = "running" if event.status == EventStatus.RUNNING else "pending"
        return DrainAnswer(state, op_occ_id, event.id)
    job = await store.jobs.current(event.id)
    if event.status in (
        EventStatus.STALE,
        EventStatus.IGNORED,
        EventStatus.ECHO,
        EventStatus.REJECTED,
    ) or (job is not None and not drains(routing, event, job)):
        by = f"handler {job.handler}" if job is not None else "no handler"
        detail = f"the PROCESSING event {event.id} is {event.status} ({by}): nothing drains here"
        return DrainAnswer("failed", op_occ_id, event.id, detail=detail)
    ran, took, nodes = await _drained(store, routing, event)
    if (ran and wanted <= took) or event.status == EventStatus.FAILED:
        if event.status == EventStatus.DONE:
            return DrainAnswer("done", op_occ_id, event.id, nodes)
        detail = redact_text(event.status_detail or event.status)
        return DrainAnswer("failed", op_occ_id, event.id, nodes, detail)
    # Done before the request came: select again, with it.
    queued = await store.replays.request([event.id], "anew")
    if queued and wake is not None:
        wake(event.vnf_instance_id)
    return DrainAnswer("pending", op_occ_id, event.id)


class DrainHook:
    """``POST {path}`` and ``GET {path}/{vnfLcmOpOccId}`` (bearer-token auth)."""

    def __init__(
        self, settings: HookSettings, store: Store, routing: RoutingTable, *, wake: Any = None
    ) -> None:
        self._settings = settings
        self._store = store
        self._routing = routing
        self._wake = wake
        self._token = settings.bearer()

    @property
    def enabled(self) -> bool:
        return bool(self._token)

    def install(self, app: web.Application) -> None:
        if not self.enabled:
            return
        app.router.add_route("POST", self._settings.path, self._post)
        app.router.add_route("GET", self._settings.path + "/{op_occ}", self._get)

    def _refused(self, request: web.Request) -> web.Response | None:
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self._token.encode()
        ):
            return None
        return problem_response(
            401,
            "the drain hook needs Authorization: Bearer <hooks.token>",
            instance=request.path,
            headers={"WWW-Authenticate": 'Bearer realm="lccn-hooks"'},
        )

    async def _post(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        if request.content_type != "application/json":
            return problem_response(
                415, "Content-Type must be application/json", instance=request.path
            )
        body = await request.content.read(_MAX_BODY + 1)
        if len(body) > _MAX_BODY:
            return problem_response(413, f"body exceeds {_MAX_BODY} bytes", instance=request.path)
        try:
            drain = DrainRequest.model_validate_json(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or None
            return problem_response(
                400, f"{field or 'body'}: {first['msg']}", instance=request.path, field=field
            )
        try:
            await self._remember(drain)
            await self._ensure_event(drain)
            await self._retry_failed(drain)
            answer = await drain_answer(
                self._store, self._routing, drain.vnfLcmOpOccId, wake=self._wake
            )
        except StoreUnavailable as exc:
            return problem_response(
                503, exc.message, instance=request.path, headers={"Retry-After": "1"}
            )
        except StoreError as exc:
            return problem_response(503, exc.message, instance=request.path)
        assert answer is not None
        log.info(
            "drain requested for op-occ %s of %s: %d server(s)",
            drain.vnfLcmOpOccId,
            drain.vnfInstanceId,
            len(drain.servers),
        )
        return web.json_response(
            answer.as_json(),
            status=202,
            headers={"Location": f"{self._settings.path}/{drain.vnfLcmOpOccId}"},
        )

    async def _get(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        op_occ = request.match_info["op_occ"]
        if not is_resource_id(op_occ):
            return problem_response(
                400, "the path's vnfLcmOpOccId is not an id", instance=request.path
            )
        try:
            answer = await drain_answer(self._store, self._routing, op_occ, wake=self._wake)
        except StoreError as exc:
            return problem_response(
                503, exc.message, instance=request.path, headers={"Retry-After": "1"}
            )
        if answer is None:
            return problem_response(
                404, f"no drain request for op-occ {op_occ}", instance=request.path
            )
        return web.json_response(answer.as_json())

    async def _remember(self, drain: DrainRequest) -> None:
        """Keep the request (servers merged with an earlier request of the op-occ)."""
        key = drain_key(drain.vnfLcmOpOccId)
        before = await self._store.tacker.get_value(key)
        servers = set(drain.servers)
        if before is not None:
            servers |= set(json.loads(before)["servers"])
        value = {
            "vnfInstanceId": drain.vnfInstanceId,
            "operation": drain.operation,
            "servers": sorted(servers),
        }
        await self._store.tacker.set_value(key, json.dumps(value, separators=(",", ":")))

    async def _retry_failed(self, drain: DrainRequest) -> None:
        """A new request after a failed drain is Tacker retrying the operation: drain again."""
        found = await self._store.events.of_op_occ(drain.vnfLcmOpOccId, "PROCESSING")
        if not found or found[0].status != EventStatus.FAILED:
            return
        job = await self._store.jobs.current(found[0].id)
        if (
            drains(self._routing, found[0], job)
            and await self._store.replays.request([found[0].id], "anew")
            and self._wake
        ):
            self._wake(found[0].vnf_instance_id)

    async def _ensure_event(self, drain: DrainRequest) -> None:
        """The op-occ's PROCESSING event exists (ours when Tacker's has not come yet)."""
        if await self._store.events.of_op_occ(drain.vnfLcmOpOccId, "PROCESSING"):
            return
        data = _synthesized(drain)
        new = NewEvent(source="hook", notification=parse_notification_data(data), body=data)
        await self._store.events.append(new)
