"""The shared component lifecycle (subscriber/lifecycle.py), alone and through real components."""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import itertools
import json
import logging
import socket
import time
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from schemas import parse_notification
from subscriber.config import DatabaseSettings, DispatchSettings, KafkaSettings, TackerSettings
from subscriber.dispatcher import Dispatcher
from subscriber.errors import ListenFailed, StoreError
from subscriber.ingest.kafka import KafkaSource
from subscriber.lifecycle import Component, State
from subscriber.metrics import Metrics
from subscriber.service import Service
from subscriber.store import EventStatus, NewEvent, Store
from subscriber.tacker import TackerClient
from subscriber.tacker.reconciler import Reconciler
from tests.conftest import make_settings, metric
from tests.factories import op_occ, uid
from tests.loopback import listen

LIFECYCLE_LOG = "subscriber.lifecycle"


class Probe(Component):
    """Writes ``start <name>`` / ``stop <name>`` into a shared journal; can be told to fail."""

    restart_initial = 0.01
    restart_max = 1.0

    def __init__(
        self,
        name: str,
        journal: list[str],
        *,
        children: tuple[Component, ...] = (),
        fail_start: bool = False,
        fail_stop: bool = False,
        gate: asyncio.Event | None = None,
    ) -> None:
        super().__init__()
        self.name = name
        self.journal = journal
        self.children = children
        self.fail_start = fail_start
        self.fail_stop = fail_stop
        self.gate = gate
        self.task_errors: list[str] = []
        self.errored = asyncio.Event()

    async def _start(self) -> None:
        self.journal.append(f"start {self.name}")
        if self.gate is not None:
            await self.gate.wait()
        for child in self.children:
            await self._start_child(child)
        if self.fail_start:
            raise ValueError(f"{self.name} cannot start")

    async def _stop(self) -> None:
        self.journal.append(f"stop {self.name}")
        if self.fail_stop:
            raise OSError(f"{self.name} cannot stop")

    def _on_task_error(self, name: str, exc: BaseException) -> None:
        self.task_errors.append(f"{name}: {exc!r}")
        self.errored.set()

    def spawn(self, name: str, factory: Callable[[], Any], *, restart: bool) -> asyncio.Task[None]:
        return self._spawn(name, factory, restart=restart)

    def use(self) -> None:
        self._ensure_running()


def crash_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LIFECYCLE_LOG and r.levelno == level]


# -- the base alone ---------------------------------------------------------------


async def test_start_twice_is_refused_and_so_is_start_after_stop() -> None:
    probe = Probe("p", [])
    await probe.start()
    assert probe.state is State.RUNNING
    with pytest.raises(RuntimeError, match="Probe cannot start: it is running"):
        await probe.start()
    await probe.stop()
    with pytest.raises(RuntimeError, match="Probe cannot start: it is stopped"):
        await probe.start()
    assert probe.journal == ["start p", "stop p"]


async def test_failed_start_stops_what_started_in_reverse_order_and_reraises() -> None:
    journal: list[str] = []
    a, b = Probe("a", journal), Probe("b", journal)
    c = Probe("c", journal, fail_start=True)
    parent = Probe("parent", journal, children=(a, b, c))
    with pytest.raises(ValueError, match="c cannot start"):
        await parent.start()
    # c undid its own start; the parent then its own part, then b and a.
    assert journal == [
        "start parent",
        "start a",
        "start b",
        "start c",
        "stop c",
        "stop parent",
        "stop b",
        "stop a",
    ]
    assert [x.state for x in (parent, a, b, c)] == [State.STOPPED] * 4
    await parent.stop()
    assert journal[-1] == "stop a"  # nothing stopped twice


async def test_failed_start_cancels_the_tasks_it_spawned() -> None:
    class Spawner(Probe):
        async def _start(self) -> None:
            self.task = self.spawn("loop", asyncio.Event().wait, restart=True)
            raise ValueError("no")

    spawner = Spawner("s", [])
    with pytest.raises(ValueError):
        await spawner.start()
    assert spawner.task.cancelled()


async def test_stop_is_idempotent_and_stops_children_in_reverse_order() -> None:
    journal: list[str] = []
    kids = tuple(Probe(n, journal) for n in "abc")
    parent = Probe("parent", journal, children=kids)
    await parent.start()
    await asyncio.gather(parent.stop(), parent.stop())
    await parent.stop()
    assert journal == [
        "start parent",
        "start a",
        "start b",
        "start c",
        "stop parent",
        "stop c",
        "stop b",
        "stop a",
    ]


async def test_stop_waits_for_a_running_start() -> None:
    journal: list[str] = []
    gate = asyncio.Event()
    probe = Probe("slow", journal, children=(Probe("kid", journal),), gate=gate)
    starting = asyncio.create_task(probe.start())
    await asyncio.sleep(0)
    assert probe.state is State.STARTING
    stopping = asyncio.create_task(probe.stop())
    await asyncio.sleep(0)
    gate.set()
    await starting
    await stopping
    assert journal == ["start slow", "start kid", "stop slow", "stop kid"]
    assert probe.state is State.STOPPED


async def test_stop_goes_on_past_a_failing_part_then_raises() -> None:
    journal: list[str] = []
    parent = Probe(
        "parent", journal, children=(Probe("a", journal), Probe("b", journal, fail_stop=True))
    )
    await parent.start()
    with pytest.raises(OSError, match="b cannot stop"):
        await parent.stop()
    assert journal[-3:] == ["stop parent", "stop b", "stop a"]
    assert parent.state is State.STOPPED


async def test_a_crashed_task_is_restarted_with_backoff_each_error_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LIFECYCLE_LOG)
    errors = [ValueError("boom")] * 3 + [KeyError("other")]
    runs: list[float] = []
    healthy = asyncio.Event()

    async def loop() -> None:
        runs.append(time.monotonic())
        if len(runs) <= len(errors):
            raise errors[len(runs) - 1]
        healthy.set()
        await asyncio.Event().wait()

    async with Probe("p", []) as probe:
        probe.spawn("loop", loop, restart=True)
        await asyncio.wait_for(healthy.wait(), 10)
        assert probe.state is State.RUNNING
        assert len(probe.task_errors) == 4
    # Each restart waits twice as long as the one before.
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    for i, gap in enumerate(gaps):
        assert gap >= 0.9 * Probe.restart_initial * 2**i, gaps
    # Three identical ValueErrors, one KeyError: two distinct errors, two error records.
    logged = crash_records(caplog, logging.ERROR)
    assert [r.exc_info[1] for r in logged if r.exc_info] == [errors[0], errors[3]]
    assert len(crash_records(caplog, logging.DEBUG)) == 2


async def test_a_task_it_cannot_work_without_fails_it_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def loop() -> None:
        raise ConnectionError("gone")

    async with Probe("p", []) as probe:
        probe.spawn("main", loop, restart=False)
        await asyncio.wait_for(probe.errored.wait(), 10)
        assert probe.state is State.FAILED
        assert probe.failure == "main died: ConnectionError: gone"
        with pytest.raises(RuntimeError, match="Probe is failed"):
            probe.use()
        assert any("Probe failed: task main died" in r.getMessage() for r in caplog.records)
    assert probe.state is State.STOPPED


async def test_use_before_start_and_after_stop_raises(tmp_path: Path) -> None:
    probe = Probe("p", [])
    with pytest.raises(RuntimeError, match="start"):
        probe.use()
    async with probe:
        probe.use()
    with pytest.raises(RuntimeError, match="Probe is stopped"):
        probe.use()

    # The same through real components.
    client = TackerClient(
        TackerSettings(
            endpoint="http://127.0.0.1:9", noauth_user_id="u" * 32, noauth_project_id="p" * 32
        )
    )
    async with client:
        pass
    with pytest.raises(RuntimeError, match="TackerClient is stopped"):
        await client.list_op_occs()
    store = Store(DatabaseSettings(url=f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"))
    async with store:
        pass
    with pytest.raises(StoreError, match="not running"):
        await store.events.append(_new_event(uid()))


async def test_a_component_started_and_never_stopped_warns() -> None:
    probe = Probe("p", [])
    await probe.start()
    with pytest.warns(ResourceWarning, match="unclosed <Probe running>"):
        del probe
        gc.collect()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        unopened, stopped = Probe("u", []), Probe("s", [])
        await stopped.start()
        await stopped.stop()
        del unopened, stopped
        gc.collect()
    assert not [w for w in seen if issubclass(w.category, ResourceWarning)]


async def test_async_with_stops_when_the_body_raises() -> None:
    journal: list[str] = []
    with pytest.raises(LookupError):
        async with Probe("p", journal) as probe:
            raise LookupError
    assert probe.state is State.STOPPED and journal == ["start p", "stop p"]


# -- through real components --------------------------------------------------------


class OpOccServer:
    """A loopback HTTP server answering ``GET .../vnf_lcm_op_occs`` with ``self.answer``."""

    def __init__(self) -> None:
        self.answer: list[dict[str, Any]] = []
        self.requests = 0
        self.asked = asyncio.Condition()
        app = web.Application()
        app.router.add_get("/vnflcm/v2/vnf_lcm_op_occs", self._op_occs)
        self.runner = web.AppRunner(app)
        self.url = ""

    async def _op_occs(self, request: web.Request) -> web.Response:
        async with self.asked:
            self.requests += 1
            self.asked.notify_all()
        return web.json_response(self.answer)

    async def wait_requests(self, count: int) -> None:
        async with self.asked:
            await asyncio.wait_for(self.asked.wait_for(lambda: self.requests >= count), 20)


@pytest.fixture
async def op_occ_server() -> AsyncIterator[OpOccServer]:
    server = OpOccServer()
    server.url = await listen(server.runner)
    yield server
    await server.runner.cleanup()


async def test_the_reconciler_loop_is_restarted_after_a_crash(
    store: Store, op_occ_server: OpOccServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LIFECYCLE_LOG)
    # Entered after the reconciler's first start: nothing from before it is read.
    now = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # An op-occ without "operation": synthesise() fails on it with a KeyError, which
    # the loop does not expect (it only survives LccnError). Its ids are well formed:
    # one whose ids are not is skipped before synthesise() (schemas.ids).
    op_occ_server.answer = [
        {
            "id": "occ-1",
            "vnfInstanceId": "inst-1",
            "stateEnteredTime": now,
            "operationState": "COMPLETED",
        },
    ]
    settings = TackerSettings(
        endpoint=op_occ_server.url,
        reconcile_interval=0.05,
        noauth_user_id="u" * 32,
        noauth_project_id="p" * 32,
    )
    async with TackerClient(settings) as client:
        reconciler = Reconciler(store, client, settings)
        reconciler.restart_initial, reconciler.restart_max = 0.01, 5.0
        async with reconciler:
            await op_occ_server.wait_requests(3)
            assert reconciler.state is State.RUNNING and reconciler.runs == 0
            op_occ_server.answer = []  # Tacker answers sensibly again
            seen = op_occ_server.requests
            await op_occ_server.wait_requests(seen + 2)
            assert reconciler.runs >= 1
    crashes = crash_records(caplog, logging.ERROR)
    assert len(crashes) == 1 and "tacker-reconciler crashed" in crashes[0].getMessage()
    assert len(crash_records(caplog, logging.DEBUG)) >= 1  # the same KeyError again


def _new_event(instance: str) -> NewEvent:
    raw = json.dumps(op_occ(instance=instance, state="COMPLETED")).encode()
    return NewEvent(source="http", notification=parse_notification(raw), raw=raw)


class GatedRunner:
    """Stands in for the runner: each event waits for ``gate``, then is marked done."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.gate = asyncio.Event()
        self.running = asyncio.Event()

    async def run(self, event: Any, lease: Any = None) -> None:
        self.running.set()
        await self.gate.wait()
        await self.store.events.set_status(event.id, EventStatus.DONE)


async def test_dispatcher_lanes_active_follows_its_lanes(store: Store) -> None:
    runner = GatedRunner(store)
    settings = DispatchSettings(reorder_window=0.0, rescan_interval=60.0)
    metrics = Metrics()

    def lanes_active() -> float:
        return metric(metrics.render().decode(), "lccn_lanes_active")

    async with Dispatcher(store, runner, settings, metrics):  # type: ignore[arg-type]
        assert lanes_active() == 0
        result = await store.events.append(_new_event(uid()))
        await asyncio.wait_for(runner.running.wait(), 10)
        assert lanes_active() == 1  # a lane is running
        runner.gate.set()
        async with asyncio.timeout(10):
            while lanes_active() != 0:
                await asyncio.sleep(0.02)
        event = await store.events.get(result.event_id)
        assert event is not None and event.status == EventStatus.DONE


async def test_a_service_whose_start_fails_stops_what_it_started(db_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        settings = make_settings(db_url)
        settings = settings.model_copy(
            update={"http": settings.http.model_copy(update={"port": taken.getsockname()[1]})}
        )
        svc = Service(settings)
        with pytest.raises(ListenFailed, match="address already in use"):
            await svc.start()
    for part in (svc, svc.store, svc.store.writer, svc.store.events, svc.dispatcher, svc.ingress):
        assert part.state is State.STOPPED, part
    with pytest.raises(RuntimeError, match="Service cannot start: it is stopped"):
        await svc.start()


async def test_a_kafka_source_whose_consumer_task_dies_fails_loudly(store: Store) -> None:
    class BrokenConsumer:
        def subscribe(self, **kw: Any) -> None:
            pass

        async def start(self) -> None:
            raise AttributeError("a bug in the consumer")

    source = KafkaSource(
        KafkaSettings(bootstrap_servers=["127.0.0.1:9"], topics=["t"]),
        store.events,
        consumer_factory=lambda **kw: BrokenConsumer(),
    )
    async with source:
        main = source._task("kafka-source")
        assert main is not None
        # The lifecycle's done-callback was added first, so it has run when this returns.
        await asyncio.gather(main, return_exceptions=True)
        assert source.state is State.FAILED and not source.ready
        assert source.status().last_error == (
            "consumer task died: AttributeError: a bug in the consumer"
        )
        assert source.failure == "kafka-source died: AttributeError: a bug in the consumer"
    assert source.state is State.STOPPED
