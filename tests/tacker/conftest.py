"""Session fixtures of the ``tacker`` tier: the real Tacker 16.0.0, the simulated OpenStack,
``lccn-subscriber serve`` subscribed to Tacker, and a recorder of what Tacker sent.

The Tacker bed itself (``bed``, ``tacker``, ``recorder``) is one per test run, shared by
every tier that needs it: it lives in ``tests/tacker_fixtures.py`` and the root
conftest. Session scope because Tacker takes seconds to start (about 7 s warm, 25 s cold) and
each test makes VNF instances of its own (unique names), so they do not interfere.
Skip this tier locally with ``-m "not tacker"``; CI always runs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openstack import connection

from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import CallbackRecorder, TackerClient
from tests.testbed.tacker_serve import ServeProcess


@pytest.fixture(scope="session")
def sim() -> Iterator[SimProcess]:
    proc = SimProcess(server_pool="10.77.0.11-10.77.0.60", vip_pool="10.77.0.200-10.77.0.219")
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def serve(
    tacker: TackerClient, recorder: CallbackRecorder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    """``serve`` subscribed to the run's Tacker. The bed is shared with other tiers, so
    ``recorded_before`` marks what the recorder had heard before serve could hear it."""
    proc = ServeProcess(tmp_path_factory.mktemp("serve"))
    proc.start()
    proc.recorded_before = len(recorder.received)
    sub = tacker.subscribe(proc.callback_url)
    yield proc
    tacker.unsubscribe(sub)
    proc.stop()


@pytest.fixture(scope="session")
def openstack_conn(sim: SimProcess) -> Iterator[Any]:
    """openstacksdk, unchanged, with password auth against the simulator's Keystone."""
    conn = connection.Connection(**sim.openstack_settings())
    yield conn
    conn.close()
