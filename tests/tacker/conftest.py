"""Session fixtures of the ``tacker`` tier: the real Tacker 16.0.0, the simulated OpenStack,
``lccn-subscriber serve`` subscribed to Tacker, and a recorder of what Tacker sent.

Session scope because Tacker takes seconds to start (about 7 s warm, 25 s cold) and
each test makes VNF instances of its own (unique names), so they do not interfere.
Skip this tier locally with ``-m "not tacker"``; CI always runs it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from openstack import connection

from tests.openstack_sim.process import SimProcess
from tests.tacker.helpers import (
    LOCK_WAITS,
    CallbackRecorder,
    ServeProcess,
    TackerClient,
)
from tests.testbed import tacker_bed

# Our sample network (a Neutron net id as Tacker would pass it through to Heat).
NETWORK_ID = "8a5c7f0e-3b2d-4c1e-9f6a-0d1e2f3a4b5c"
_timings: dict[str, float] = {}


@pytest.fixture(scope="session")
def sim() -> Iterator[SimProcess]:
    proc = SimProcess(server_pool="10.77.0.11-10.77.0.60", vip_pool="10.77.0.200-10.77.0.219")
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def bed() -> Iterator[tacker_bed.BedState]:
    if not tacker_bed.is_installed():
        pytest.fail(
            f"Tacker {tacker_bed.TACKER_VERSION} is not installed: run "
            "`bash scripts/setup.d/20-tacker.sh` (scripts/test.sh does), "
            'or skip this tier with -m "not tacker"'
        )
    state = tacker_bed.start(owner_pid=os.getpid())  # a killed run leaves nothing behind
    _timings["start to ready"] = state.started_in
    try:
        t0 = time.monotonic()
        tacker_bed.build_and_onboard(state)
        _timings["onboard"] = round(time.monotonic() - t0, 1)
        yield state
    finally:
        tacker_bed.stop(state)


@pytest.fixture(scope="session")
def tacker(bed: tacker_bed.BedState) -> TackerClient:
    return TackerClient(bed.url)


@pytest.fixture(scope="session")
def recorder(tacker: TackerClient) -> Iterator[CallbackRecorder]:
    rec = CallbackRecorder()
    rec.start()
    sub = tacker.subscribe(rec.url)
    yield rec
    tacker.unsubscribe(sub)
    rec.stop()


@pytest.fixture(scope="session")
def serve(tacker: TackerClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    proc = ServeProcess(tmp_path_factory.mktemp("serve"))
    proc.start()
    sub = tacker.subscribe(proc.callback_url)
    yield proc
    tacker.unsubscribe(sub)
    proc.stop()


@pytest.fixture(scope="session")
def openstack_conn(sim: SimProcess) -> Iterator[Any]:
    """openstacksdk, unchanged, with password auth against the simulator's Keystone."""
    c = sim.config
    conn = connection.Connection(
        auth_url=sim.auth_url,
        username=c.username,
        password=c.password,
        project_name=c.project_name,
        user_domain_name=c.domain,
        project_domain_name=c.domain,
        region_name=c.region,
    )
    yield conn
    conn.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _timings:
        parts = ", ".join(f"{k} {v} s" for k, v in _timings.items())
        terminalreporter.write_line(f"tacker bed: {parts}")
    if LOCK_WAITS:
        terminalreporter.write_line(
            f"tacker bed: DELETE after TERMINATE waited on 409 up to {max(LOCK_WAITS):.2f} s "
            f"({sum(w > 0 for w in LOCK_WAITS)} of {len(LOCK_WAITS)} deletes got 409 first)"
        )
