"""The runner: checkpoints, resume at the first step not done, retry classes, backoff."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import aiohttp
import pytest

from schemas import Notification
from subscriber.errors import (
    PermanentStepError,
    SkipStep,
    SshConnectError,
    SshConnectionLost,
    TransientStepError,
)
from subscriber.kernel import JobContext, Plan, RetryClass, RoutingTable, Step
from subscriber.store import JobStatus, StepStatus
from tests.conftest import ServiceFactory, callback_url, wait_settled
from tests.factories import op_occ

pytestmark = pytest.mark.asyncio


class Scripted:
    """A handler whose steps fail as scripted: ``faults[name]`` is a list of exceptions to raise."""

    name = "scripted"

    def __init__(
        self,
        names: list[str],
        faults: dict[str, list[BaseException]] | None = None,
        idempotent: dict[str, bool] | None = None,
        timeout: float = 5.0,
        retry: RetryClass = RetryClass.AUTO,
        skip: set[str] | None = None,
    ) -> None:
        self.names = names
        self.faults = faults or {}
        self.idempotent = idempotent or {}
        self.timeout = timeout
        self.retry = retry
        self.skip = skip or set()
        self.calls: Counter[str] = Counter()
        self.seen_results: list[dict[str, Any]] = []

    def plan(self, notification: Notification) -> Plan:
        def make(name: str) -> Step:
            async def run(ctx: JobContext) -> Any:
                self.calls[name] += 1
                self.seen_results.append(dict(ctx.results))
                if name in self.skip:
                    raise SkipStep("already there", result={"skipped": name})
                pending = self.faults.get(name)
                if pending:
                    raise pending.pop(0)
                return {"ran": name}

            return Step(
                name,
                run,
                idempotent=self.idempotent.get(name, True),
                timeout=self.timeout,
                retry=self.retry,
            )

        return Plan(tuple(make(n) for n in self.names))


def reg(handler: Any) -> RoutingTable:
    r = RoutingTable()
    r.register(handler)
    return r


async def _send(http: aiohttp.ClientSession, url: str) -> None:
    async with http.post(url, json=op_occ(state="COMPLETED")) as resp:
        assert resp.status == 204


async def _run(
    start_service: ServiceFactory, http: aiohttp.ClientSession, handler: Any, **dispatch: Any
) -> tuple[Any, Any, list[Any]]:
    """Start a Service that routes to ``handler`` alone, send it one event and wait for the
    event to settle: the event, its job and the job's steps."""
    svc = await start_service(routing=reg(handler), **dispatch)
    await _send(http, callback_url(svc))
    return await _job(svc)


async def _job(svc: Any) -> tuple[Any, Any, list[Any]]:
    (event,) = await wait_settled(svc, 1)
    job = await svc.store.jobs.current(event.id)
    steps = await svc.store.jobs.steps(job.id)
    return event, job, steps


async def test_transient_failure_resumes_at_the_failed_step(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    h = Scripted(
        ["discover", "install", "token"],
        faults={"install": [TransientStepError("ssh connect refused")] * 2},
    )
    event, job, steps = await _run(start_service, http, h, backoff_initial=0.05, backoff_max=0.1)
    assert event.status == "done" and job.status == JobStatus.DONE
    assert h.calls == Counter({"discover": 1, "install": 3, "token": 1})
    assert [(s.name, s.status, s.attempts) for s in steps] == [
        ("discover", "done", 1),
        ("install", "done", 3),
        ("token", "done", 1),
    ]
    assert job.attempts == 2
    # Later steps see earlier results, also after a retry (loaded from the store).
    assert h.seen_results[-1] == {"discover": {"ran": "discover"}, "install": {"ran": "install"}}


async def test_backoff_is_persisted_and_respected(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    h = Scripted(["a"], faults={"a": [TransientStepError("5xx")]})
    svc = await start_service(routing=reg(h), backoff_initial=1.0, backoff_max=1.0)
    t0 = time.time()
    await _send(http, callback_url(svc))
    async with asyncio.timeout(10):
        while True:
            (event,) = await svc.store.events.list()
            job = await svc.store.jobs.current(event.id) if event.status == "retry" else None
            if job is not None:
                break
            await asyncio.sleep(0.01)
    assert job.status == JobStatus.RETRY
    assert job.next_attempt_at is not None and job.next_attempt_at >= t0 + 0.5
    assert "5xx" in (job.last_error or "")
    event, job, _ = await _job(svc)
    assert event.status == "done"
    assert time.time() - t0 >= 0.5  # the second attempt waited for its backoff


async def test_permanent_failure_fails_the_job_and_keeps_the_event(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    h = Scripted(
        ["validate", "install"],
        faults={"validate": [PermanentStepError("master_node.password missing")]},
    )
    event, job, steps = await _run(start_service, http, h)
    assert event.status == "failed"
    assert job.status == JobStatus.FAILED and job.error_class == "permanent"
    assert "master_node.password missing" in (job.last_error or "")
    assert h.calls == Counter({"validate": 1})
    assert [(s.name, s.status) for s in steps] == [("validate", StepStatus.FAILED)]


async def test_attempts_are_bounded(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    h = Scripted(["a"], faults={"a": [TransientStepError("down")] * 10})
    svc = await start_service(
        routing=reg(h), max_attempts=3, backoff_initial=0.01, backoff_max=0.02
    )
    await _send(http, callback_url(svc))
    event, job, _ = await _job(svc)
    assert event.status == "failed"
    assert job.attempts == 3 and h.calls["a"] == 3
    assert "gave up after 3 attempts" in (job.last_error or "")


async def test_unclassified_errors_follow_the_steps_retry_class(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    h = Scripted(["a"], faults={"a": [ConnectionResetError("reset"), ValueError("bad")]})
    event, job, _ = await _run(start_service, http, h, backoff_initial=0.01, backoff_max=0.02)
    # OSError -> transient (retried), ValueError -> permanent.
    assert h.calls["a"] == 2 and event.status == "failed" and job.error_class == "permanent"


async def test_retry_class_never_makes_transient_errors_permanent(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    h = Scripted(["a"], faults={"a": [TransientStepError("x")]}, retry=RetryClass.NEVER)
    event, _, _ = await _run(start_service, http, h)
    assert event.status == "failed" and h.calls["a"] == 1


async def test_skip_step_is_recorded_with_its_result(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    h = Scripted(["init", "join"], skip={"init"})
    event, _, steps = await _run(start_service, http, h)
    assert event.status == "done"
    assert [(s.name, s.status) for s in steps] == [("init", "skipped"), ("join", "done")]
    assert h.seen_results[-1] == {"init": {"skipped": "init"}}


async def test_timeout_of_an_idempotent_step_is_transient(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    class Slow(Scripted):
        def plan(self, notification: Notification) -> Plan:
            async def slow(ctx: JobContext) -> None:
                self.calls["slow"] += 1
                if self.calls["slow"] == 1:
                    await asyncio.sleep(5)

            return Plan((Step("slow", slow, idempotent=True, timeout=0.2),))

    h = Slow([])
    event, _job_row, steps = await _run(
        start_service, http, h, backoff_initial=0.01, backoff_max=0.02
    )
    assert event.status == "done" and h.calls["slow"] == 2 and steps[0].attempts == 2


async def test_timeout_of_a_non_idempotent_step_is_never_rerun(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    calls = Counter[str]()

    class Slow:
        name = "slow"

        def plan(self, notification: Notification) -> Plan:
            async def once(ctx: JobContext) -> None:
                calls["once"] += 1
                await asyncio.sleep(5)

            return Plan((Step("once", once, idempotent=False, timeout=0.2),))

    svc = await start_service(routing=reg(Slow()), backoff_initial=0.01)
    await _send(http, callback_url(svc))
    event, job, _ = await _job(svc)
    assert event.status == "failed" and job.error_class == "interrupted"
    assert calls["once"] == 1


@pytest.mark.parametrize("idempotent", [False, True])
async def test_a_lost_ssh_connection_is_retried_only_for_an_idempotent_step(
    start_service: ServiceFactory, http: aiohttp.ClientSession, idempotent: bool
) -> None:
    # The remote command may have run (or still run) when the connection broke:
    # a step that is not idempotent must not be run again blindly.
    lost = SshConnectionLost("run on root@10.0.0.5:22: connection lost", host="root@10.0.0.5:22")
    h = Scripted(["remote"], faults={"remote": [lost]}, idempotent={"remote": idempotent})
    event, job, steps = await _run(start_service, http, h, backoff_initial=0.01)
    if idempotent:
        assert event.status == "done" and h.calls["remote"] == 2
    else:
        assert event.status == "failed" and job.error_class == "interrupted"
        assert h.calls["remote"] == 1
        assert "not retried (check the node, then replay)" in (job.last_error or "")
        assert steps[0].status == StepStatus.FAILED


async def test_a_connect_failure_of_a_non_idempotent_step_is_retried(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    # Nothing ran when the host could not be reached at all.
    refused = SshConnectError("connect to root@10.0.0.5:22: refused", host="root@10.0.0.5:22")
    h = Scripted(["remote"], faults={"remote": [refused]}, idempotent={"remote": False})
    event, _job_row, _ = await _run(start_service, http, h, backoff_initial=0.01)
    assert event.status == "done" and h.calls["remote"] == 2


async def test_failing_plan_is_classified_too(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    class Broken:
        name = "broken"

        def plan(self, notification: Notification) -> Plan:
            raise PermanentStepError("k8s_cluster_installation_param is missing")

    svc = await start_service(routing=reg(Broken()))
    await _send(http, callback_url(svc))
    event, job, _ = await _job(svc)
    assert event.status == "failed" and "k8s_cluster_installation_param" in (job.last_error or "")
