"""Fixtures shared by every tier: free ports, a real service on loopback with a real SQLite file."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import socket
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from subscriber.config import (
    DatabaseSettings,
    DispatchSettings,
    HttpSettings,
    Settings,
)
from subscriber.kernel import RoutingTable, Services
from subscriber.service import Service
from subscriber.store import Store
from tests.backends import pg_url
from tests.tacker_fixtures import (  # one Tacker bed per run, for every tier
    bed,
    pytest_terminal_summary,
    recorder,
    tacker,
    v1_vnfd,
)
from tests.testbed import kafka_broker

__all__ = ["bed", "broker", "pg_url", "pytest_terminal_summary", "recorder", "tacker", "v1_vnfd"]


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kafka_broker.Broker]:
    """One Kafka-protocol broker (Tansu) for the session, started by the first test that
    asks; tests isolate themselves with unique topics and groups."""
    try:
        kafka_broker.tansu_binary()
    except FileNotFoundError as exc:
        pytest.fail(str(exc))
    running = kafka_broker.start_broker(log=tmp_path_factory.mktemp("kafka") / "tansu.log")
    yield running
    running.stop()


# The markers a tier directory gives every test in it (tests/README.md).
TIER_MARKERS = {
    "ssh": ("ssh",),
    "kafka": ("kafka",),
    "k8s": ("k8s",),
    "e2e": ("tacker", "ssh", "e2e"),
    "prometheus": ("prometheus",),
    "container": ("container", "postgres"),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        path = Path(str(item.fspath))
        if here in path.parents:
            for marker in TIER_MARKERS.get(path.relative_to(here).parts[0], ()):
                item.add_marker(getattr(pytest.mark, marker))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A SQLite file (``tests/store/`` runs the tests that take it on PostgreSQL too)."""
    return f"sqlite+aiosqlite:///{tmp_path / 'lccn.db'}"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    """The store, started, on ``db_url``."""
    async with Store(DatabaseSettings(url=db_url)) as running:
        yield running


def make_settings(
    db_url: str, *, update: Mapping[str, Any] | None = None, **dispatch: Any
) -> Settings:
    """Settings on a free loopback port and ``db_url``; ``dispatch`` settings as given, and
    whole sections (``{"hooks": HookSettings(...)}``) replaced by ``update``."""
    settings = Settings(
        http=HttpSettings(host="127.0.0.1", port=free_port()),
        database=DatabaseSettings(url=db_url),
        dispatch=DispatchSettings(**{"rescan_interval": 0.5, **dispatch}),
    )
    return settings.model_copy(update=update) if update else settings


ServiceFactory = Callable[..., Any]


class Lifecycle(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


C = TypeVar("C", bound=Lifecycle)


class Started(Generic[C]):
    """A fixture's starter: ``await started(...)`` makes a component with ``make``, starts
    it and keeps it; leaving the ``async with`` stops every one kept, last first."""

    def __init__(self, make: Callable[..., C]) -> None:
        self._make = make
        self.items: list[C] = []

    async def __call__(self, *args: Any, **kwargs: Any) -> C:
        item = self._make(*args, **kwargs)
        await item.start()
        self.items.append(item)
        return item

    async def __aenter__(self) -> Started[C]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for item in reversed(self.items):
            await item.stop()


@pytest.fixture
async def start_service(db_url: str) -> AsyncIterator[ServiceFactory]:
    """Start a real Service (HTTP on a free loopback port, SQLite file); stopped at teardown."""

    def make(
        routing: RoutingTable | None = None,
        services: Services | None = None,
        update: Mapping[str, Any] | None = None,
        **dispatch: Any,
    ) -> Service:
        settings = make_settings(db_url, update=update, **dispatch)
        return Service(settings, routing=routing, services=services)

    async with Started(make) as start:
        yield start


@pytest.fixture
def loop_device(tmp_path: Path) -> Iterator[str]:
    """A 64 MiB loop device over a file of this test (root); detached afterwards."""
    image = tmp_path / "loop.img"
    with image.open("wb") as fh:
        fh.truncate(64 * 1024 * 1024)
    argv = ["losetup", "--find", "--show", str(image)]
    dev = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()
    yield dev
    subprocess.run(["losetup", "--detach", dev], check=False)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def callback_url(svc: Service) -> str:
    return f"http://127.0.0.1:{svc.port}{svc.settings.http.path}"


def basic(user: str, password: str) -> str:
    """An ``Authorization`` header value for HTTP Basic."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class TokenAnswer(NamedTuple):
    status: int
    body: Any
    headers: Mapping[str, str]


async def fetch_token(
    http: aiohttp.ClientSession, base: str, form: Mapping[str, str], **request: Any
) -> TokenAnswer:
    """POST ``form`` to the OAuth 2.0 token endpoint at ``{base}/token`` (``request``: the
    request's ``headers``, ``ssl``); its status, JSON body (None when empty) and headers."""
    async with http.post(f"{base}/token", data=form, **request) as resp:
        return TokenAnswer(resp.status, await resp.json(content_type=None), resp.headers)


def metric(text: str, sample: str) -> float:
    """The value of one sample written ``name{a="x",b="y"}`` (any label order), 0 when absent."""
    name, _, rest = sample.partition("{")
    want = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == want:
                return float(s.value)
    return 0.0


async def scrape(http: aiohttp.ClientSession, svc: Service) -> str:
    async with http.get(f"http://127.0.0.1:{svc.port}/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return await resp.text()


async def wait_lanes_idle(http: aiohttp.ClientSession, svc: Service, timeout: float = 10.0) -> None:
    """Wait until ``/metrics`` shows no lane running (``lccn_lanes_active`` 0): after
    :func:`wait_settled`, the lanes have also written their last counters and leases."""
    async with asyncio.timeout(timeout):
        while metric(await scrape(http, svc), "lccn_lanes_active") != 0:
            await asyncio.sleep(0.02)


TERMINAL = frozenset({"done", "failed", "ignored", "stale", "echo", "poison", "rejected"})


async def wait_until(
    predicate: Callable[[], Awaitable[Any]], *, timeout: float = 120.0, what: str = ""
) -> Any:
    """``predicate``'s first truthy answer, asked every 0.2 s; fails the test after
    ``timeout`` seconds, naming ``what`` it waited for."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                value = await predicate()
                if value:
                    return value
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}") from None


async def rerun(svc: Service, event_id: int, timeout: float = 240.0) -> Any:
    """Run a settled event's job once more, from step one, as an operator's replay does
    (through its lane, under the lane's lease); return the event once settled again.

    Calling ``svc.runner.run`` directly instead races the running dispatcher, which may
    take the same event meanwhile and resume the same job beside it."""
    assert await svc.store.replays.request([event_id], "anew") == [event_id]
    event = await svc.store.events.get(event_id)
    svc.dispatcher.poke(event.vnf_instance_id)
    async with asyncio.timeout(timeout):
        while True:
            event = await svc.store.events.get(event_id)
            if event.status in TERMINAL and not event.replay_mode:
                return event
            await asyncio.sleep(0.05)


async def wait_settled(svc: Service, count: int | None = None, timeout: float = 20.0) -> list[Any]:
    """Wait until (``count``) stored events all reached a terminal status; return them."""
    async with asyncio.timeout(timeout):
        while True:
            events = await svc.store.events.list()
            if (count is None or len(events) >= count) and all(
                e.status in TERMINAL for e in events
            ):
                return events
            await asyncio.sleep(0.02)


@pytest.fixture
def spans() -> Iterator[Any]:
    """Tracing on in this process (the ``otel`` extra), every span kept in memory (the
    SDK's ``InMemorySpanExporter``); off again after."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from subscriber import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)
        provider.shutdown()


@pytest.fixture(scope="session", autouse=True)
def _private_lccn_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The run's own ``LCCN_HOME`` (the default store and known_hosts), for the tests and
    every process they start: nothing writes under the user's ~/.local/share, and no test
    meets a store another run left there (with a newer schema, say)."""
    old = os.environ.get("LCCN_HOME")
    os.environ["LCCN_HOME"] = str(tmp_path_factory.mktemp("lccn-home"))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("LCCN_HOME", None)
        else:
            os.environ["LCCN_HOME"] = old
