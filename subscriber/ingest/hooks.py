"""Tacker's management-driver hooks: the VNF package's script asks us to run the op-occ's
cluster job for one point of the operation, and waits for the answer.

Tacker 16 runs the package's ``instantiate_end``, ``scale_start`` ... script inside the
operation and fails the op-occ (FAILED_TEMP, our reason in its ``error``) when it
exits non-zero; it deletes the VMs of a SCALE_IN or HEAL right after ``*_start`` and
says COMPLETED right after ``*_end`` (TACKER.md §1.7). Our script (``Scripts/lccn_hook.py``
of the sample package) POSTs a :class:`~schemas.hooks.HookRequest` here, then polls
``GET {path}/{vnfLcmOpOccId}/{point}`` until the answer is ``done`` or ``failed``.

Each point is answered by the job of one transition of the op-occ
(:data:`schemas.hooks.HOOK_POINTS`): the one the routing table gives that
(operation, transition), the same checkpointed job the notification runs without
hooks; the hook only moves its trigger into the operation. The request is kept in the
store first (key ``hook:<op-occ>:<state>``), then the transition's event is made or
found, so a restart of ``serve`` loses neither the request nor the answer:

- no event of that transition yet: we append one ourselves (source ``hook``), with
  the same dedup key as Tacker's notification, so whichever arrives second is the
  duplicate (COMPLETED always comes second: Tacker sends it once the script is done);
- an event that is waiting or running: the answer is its job's;
- a failed one, asked again: Tacker retries (or rolls back) the operation, so we run
  the job again, resuming from its checkpoints (a drain anew: its request may differ);
- a drain that ran before its request came (Tacker notifies PROCESSING before it runs
  the script): queued again, to drain with the request.

A job run by a hook hands our ``vimConnectionInfo`` entry back (sealed, see
:mod:`subscriber.handback`) instead of PATCHing it, and the answer carries it to the
script, which returns it to Tacker inside the operation. Auth: ``Authorization: Bearer
<hooks.token>``; the routes exist only when a token is configured.
"""

from __future__ import annotations

import datetime as dt
import hmac
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from handlers.results import DrainServers, Leaving
from schemas import LcmOperationStateType, parse_notification_data
from schemas.hooks import HOOK_POINTS, HookRequest, hook_key
from schemas.ids import error_message, is_resource_id
from subscriber.config import HookSettings
from subscriber.errors import StoreError, StoreUnavailable
from subscriber.handback import HookAnswers
from subscriber.ingest.problems import problem_response
from subscriber.ingest.traced import append_traced
from subscriber.kernel import RoutingTable
from subscriber.redact import redact, redact_text
from subscriber.store import EventRow, EventStatus, NewEvent, StepStatus, Store
from subscriber.store.jobs import JobRow

__all__ = ["HookAnswer", "LcmHooks", "hook_answer", "routed"]

log = logging.getLogger(__name__)

# A VNF instance with many VNFCs is a few hundred kilobytes as Tacker holds it.
_MAX_BODY = 1024 * 1024
# What of the job's failure the script prints (Tacker puts it in the op-occ's error).
_DETAIL_MAX = 400
_SETTLED_ELSEWHERE = (
    EventStatus.STALE,
    EventStatus.IGNORED,
    EventStatus.ECHO,
    EventStatus.REJECTED,
)

Wake = Callable[[str | None], None]


@dataclass(frozen=True, slots=True)
class HookAnswer:
    """Where a hook's job stands: ``pending``, ``running``, ``done`` or ``failed``.

    ``vim_connection_info`` (``done`` only): what the job handed back, for the script to
    return to Tacker inside the operation.
    """

    status: str
    op_occ_id: str
    point: str
    event_id: int | None = None
    nodes: tuple[str, ...] = ()
    detail: str | None = None
    vim_connection_info: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "vnfLcmOpOccId": self.op_occ_id,
            "point": self.point,
            "status": self.status,
            "eventId": self.event_id,
            "nodes": list(self.nodes),
        }
        if self.detail:
            out["detail"] = self.detail
        if self.vim_connection_info:
            out["vimConnectionInfo"] = self.vim_connection_info
        return out


def _synthesized(request: HookRequest) -> dict[str, Any]:
    """The op-occ's notification of the hook's transition, as Tacker v2 would send it."""
    base = "/vnflcm/v2"
    occ = request.vnfLcmOpOccId
    return {
        # A valid notification id whatever the op-occ id's length (schemas.ids).
        "id": f"lccn-hook-{uuid.uuid5(uuid.NAMESPACE_URL, f'{occ}:{request.state}')}",
        "notificationType": "VnfLcmOperationOccurrenceNotification",
        "subscriptionId": "lccn-hook",
        "timeStamp": dt.datetime.now(dt.UTC).isoformat(),
        "notificationStatus": "RESULT",  # v2: START is for STARTING only
        "operationState": request.state.value,
        "vnfInstanceId": request.vnfInstanceId,
        "operation": request.operation.value,
        "isAutomaticInvocation": False,
        "vnfLcmOpOccId": occ,
        "_links": {
            "vnfInstance": {"href": f"{base}/vnf_instances/{request.vnfInstanceId}"},
            "subscription": {"href": f"{base}/subscriptions/lccn-hook"},
            "vnfLcmOpOcc": {"href": f"{base}/vnf_lcm_op_occs/{occ}"},
        },
    }


def routed(routing: RoutingTable, event: EventRow, job: JobRow | None) -> bool:
    """Whether ``job`` is the job the routing table gives ``event``'s (operation, state)."""
    if job is None or not event.operation or not event.operation_state:
        return False
    handler = routing.handler_for(event.operation, event.operation_state)
    return handler is not None and job.handler == handler.name


def _hook_event(found: list[EventRow], state: LcmOperationStateType) -> EventRow | None:
    """The event that answers the hook among the op-occ's events of its transition (newest
    first). COMPLETED: ours (a COMPLETED of a later attempt is Tacker's word after the
    hook answered); a transition Tacker notifies before it runs the script: the newest."""
    if not found:
        return None
    if state is LcmOperationStateType.COMPLETED:
        return next((e for e in found if e.source == "hook"), found[0])
    return found[0]


async def _drained(
    store: Store, routing: RoutingTable, event: EventRow
) -> tuple[bool, set[str], tuple[str, ...]]:
    """Whether the event's current job read the drain request; the servers it took; the
    nodes it selected."""
    job = await store.jobs.current(event.id)
    if job is None or not routed(routing, event, job):
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


def _failure(event: EventRow) -> str:
    """The job's reason, one line, no secret, bounded: the script prints it to Tacker."""
    text = redact_text(event.status_detail or event.status)
    line = " ".join(text.split())
    return line if len(line) <= _DETAIL_MAX else line[: _DETAIL_MAX - 3] + "..."


async def hook_answer(
    store: Store,
    routing: RoutingTable,
    op_occ_id: str,
    point: str,
    *,
    answers: HookAnswers | None = None,
    wake: Wake | None = None,
) -> HookAnswer | None:
    """The answer to the op-occ's hook at ``point`` (``None``: no such request), queuing
    a drain again when its event ran before the request came (see above)."""
    operation, state = HOOK_POINTS[point]
    raw = await store.tacker.get_value(hook_key(op_occ_id, state))
    if raw is None:
        return None
    request = HookRequest.model_validate_json(raw)
    event = _hook_event(await store.events.of_op_occ(op_occ_id, state), state)
    if event is None:
        return HookAnswer("pending", op_occ_id, point)
    if event.status in EventStatus.OPEN:
        running = event.status in (EventStatus.RUNNING, EventStatus.RETRY)
        detail = _failure(event) if event.status == EventStatus.RETRY else None
        return HookAnswer(
            "running" if running else "pending", op_occ_id, point, event.id, (), detail
        )
    if event.status == EventStatus.REJECTED:  # Tacker contradicted it: say why
        detail = f"event {event.id} rejected: {_failure(event)}"
        return HookAnswer("failed", op_occ_id, point, event.id, detail=detail)
    job = await store.jobs.current(event.id)
    if event.status in _SETTLED_ELSEWHERE or (job is not None and not routed(routing, event, job)):
        by = f"handler {job.handler}" if job is not None else "no handler"
        detail = (
            f"the {state.value} event {event.id} of {operation.value} is {event.status} "
            f"({by}): nothing runs this hook here"
        )
        return HookAnswer("failed", op_occ_id, point, event.id, detail=detail)
    if request.drains:
        ran, took, nodes = await _drained(store, routing, event)
        if not (ran and set(request.servers) <= took) and event.status != EventStatus.FAILED:
            # Done before the request came: select again, with it.
            if await store.replays.request([event.id], "anew") and wake is not None:
                wake(event.vnf_instance_id)
            return HookAnswer("pending", op_occ_id, point, event.id)
    else:
        nodes = ()
    if event.status == EventStatus.FAILED:
        return HookAnswer("failed", op_occ_id, point, event.id, nodes, _failure(event))
    handed = await answers.read(op_occ_id) if answers is not None else None
    return HookAnswer("done", op_occ_id, point, event.id, nodes, vim_connection_info=handed)


class LcmHooks:
    """``POST {path}`` and ``GET {path}/{vnfLcmOpOccId}/{point}`` (bearer-token auth).

    Arguments:
        settings: the ``hooks`` section.
        store: where requests and events are kept.
        routing: says which job answers a hook (by its route).
        answers: opens what a job handed back (``None``: hooks off).
        wake: wakes whoever runs the jobs, for an event queued again.
    """

    def __init__(
        self,
        settings: HookSettings,
        store: Store,
        routing: RoutingTable,
        *,
        answers: HookAnswers | None = None,
        wake: Wake | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._routing = routing
        self._answers = answers
        self._wake = wake
        self._token = settings.bearer()

    @property
    def enabled(self) -> bool:
        return bool(self._token)

    def install(self, app: web.Application) -> None:
        if not self.enabled:
            return
        app.router.add_route("POST", self._settings.path, self._post)
        app.router.add_route("GET", self._settings.path + "/{op_occ}/{point}", self._get)

    def _refused(self, request: web.Request) -> web.Response | None:
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self._token.encode()
        ):
            return None
        return problem_response(
            401,
            "the hooks need Authorization: Bearer <hooks.token>",
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
            hook = HookRequest.model_validate_json(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or None
            return problem_response(
                400,
                f"{field or 'body'}: {error_message(first)}",
                instance=request.path,
                field=field,
            )
        try:
            await self._remember(hook)
            await self._run(hook)
            answer = await hook_answer(
                self._store,
                self._routing,
                hook.vnfLcmOpOccId,
                hook.point,
                answers=self._answers,
                wake=self._wake,
            )
        except StoreUnavailable as exc:
            return problem_response(
                503, exc.message, instance=request.path, headers={"Retry-After": "1"}
            )
        except StoreError as exc:
            return problem_response(503, exc.message, instance=request.path)
        assert answer is not None
        log.info(
            "hook %s for op-occ %s of %s: %s",
            hook.point,
            hook.vnfLcmOpOccId,
            hook.vnfInstanceId,
            answer.status,
            extra={"vnfInstanceId": hook.vnfInstanceId, "vnfLcmOpOccId": hook.vnfLcmOpOccId},
        )
        return web.json_response(
            answer.as_json(),
            status=202,
            headers={"Location": f"{self._settings.path}/{hook.vnfLcmOpOccId}/{hook.point}"},
        )

    async def _get(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        op_occ, point = request.match_info["op_occ"], request.match_info["point"]
        if not is_resource_id(op_occ):
            return problem_response(
                400, "the path's vnfLcmOpOccId is not an id", instance=request.path
            )
        if point not in HOOK_POINTS:
            return problem_response(
                400,
                f"the path's point is not one of {', '.join(HOOK_POINTS)}",
                instance=request.path,
            )
        try:
            answer = await hook_answer(
                self._store, self._routing, op_occ, point, answers=self._answers, wake=self._wake
            )
        except StoreError as exc:
            return problem_response(
                503, exc.message, instance=request.path, headers={"Retry-After": "1"}
            )
        if answer is None:
            return problem_response(
                404, f"no {point} hook request for op-occ {op_occ}", instance=request.path
            )
        return web.json_response(answer.as_json())

    async def _remember(self, hook: HookRequest) -> None:
        """Keep the request before any event of it exists (a drain's servers merged with an
        earlier request of the op-occ): its job reads it from the store."""
        key = hook_key(hook.vnfLcmOpOccId, hook.state)
        servers = set(hook.servers)
        if hook.drains:
            before = await self._store.tacker.get_value(key)
            if before is not None:
                servers |= set(json.loads(before).get("servers") or ())
        kept = hook.model_copy(update={"servers": sorted(servers)})
        value = json.dumps(redact(kept.model_dump(mode="json")), separators=(",", ":"))
        await self._store.tacker.set_value(key, value)

    async def _run(self, hook: HookRequest) -> None:
        """The transition's event exists, and a failed one runs again (Tacker retries)."""
        found = await self._store.events.of_op_occ(hook.vnfLcmOpOccId, hook.state)
        event = _hook_event(found, hook.state)
        if event is None:
            data = _synthesized(hook)
            new = NewEvent(source="hook", notification=parse_notification_data(data), body=data)
            await append_traced(self._store.events.append, new)
            return
        if event.status != EventStatus.FAILED:
            return
        job = await self._store.jobs.current(event.id)
        if not routed(self._routing, event, job):
            return
        # A drain again from the start: its request may name other servers now.
        mode = "anew" if hook.drains else "resume"
        if await self._store.replays.request([event.id], mode) and self._wake is not None:
            self._wake(event.vnf_instance_id)
