"""The one real Tacker 16.0.0 of a test run, shared by every tier that needs it (``tacker``,
``e2e``, ``k8s``): ``bed`` (the running Tacker with our sample package onboarded),
``tacker`` (a synchronous client of it), ``recorder`` (a subscriber that records what
Tacker sent) and ``v1_vnfd`` (the v1 package, onboarded when a v1 test asks). The root
conftest imports these, so pytest holds one definition of each and a session starts
Tacker once, however many tiers it runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.testbed import tacker_bed
from tests.testbed.tacker_api import LOCK_WAITS, CallbackRecorder, TackerClient

_timings: dict[str, float] = {}
STARTS: list[float] = []


@pytest.fixture(scope="session")
def bed() -> Iterator[tacker_bed.BedState]:
    if not tacker_bed.is_installed():
        pytest.fail(
            f"Tacker {tacker_bed.TACKER_VERSION} is not installed: run "
            "`bash scripts/setup.d/20-tacker.sh` (scripts/test.sh does), "
            'or skip this tier with -m "not tacker"'
        )
    STARTS.append(time.monotonic())
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
def v1_vnfd(bed: tacker_bed.BedState) -> str:
    """The vnfdId of the v1 package (BaseHOT + user data, seed 000's format) on the run's
    bed, onboarded once for the tiers that drive the v1 API."""
    t0 = time.monotonic()
    vnfd_id = tacker_bed.build_and_onboard(bed, "kubernetes_cluster_v1")
    _timings["onboard v1"] = round(time.monotonic() - t0, 1)
    return vnfd_id


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


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if len(STARTS) > 1:
        terminalreporter.write_line(f"tacker bed: started {len(STARTS)} times in one run")
    if _timings:
        parts = ", ".join(f"{k} {v} s" for k, v in _timings.items())
        terminalreporter.write_line(f"tacker bed: {parts}")
    if LOCK_WAITS:
        terminalreporter.write_line(
            f"tacker bed: DELETE after TERMINATE waited on 409 up to {max(LOCK_WAITS):.2f} s "
            f"({sum(w > 0 for w in LOCK_WAITS)} of {len(LOCK_WAITS)} deletes got 409 first)"
        )
