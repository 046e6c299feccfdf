"""SCALE_IN with the drain hook, the full loop: the real Tacker runs the package's
``lccn_hook.py`` (its ``scale_start``), which asks ``serve`` (a subprocess, hook token set)
to drain; ``serve``'s drain job drains and deletes the leaving node on the test hosts, and
only then does Tacker shrink the Heat stack (the VM's deletion); COMPLETED then finds the
cluster already agreeing, and the instance, cluster, /etc/hosts and inventory agree.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import tacker_bed as tb
from testbed.openstack_sim.process import SimProcess
from testbed.tacker_api import CallbackRecorder, TackerClient, wait_for
from tests.tacker.helpers import ServeProcess

from .conftest import serve_config
from .day2 import Loop

pytestmark = [pytest.mark.timeout(900), pytest.mark.usefixtures("fresh_cluster")]

TOKEN = "e2e-hook-token-0c9d2b"


@pytest.fixture
def hooked_loop(
    bed: tb.BedState,
    tacker: TackerClient,
    host_sim: SimProcess,
    hosts: Any,
    recorder: CallbackRecorder,
    tmp_path: Path,
) -> Iterator[Loop]:
    """serve with the drain hook on, and Tacker's conductor pointed at it."""
    proc = ServeProcess(
        tmp_path, config={**serve_config(bed, host_sim, hosts), "hooks": {"token": TOKEN}}
    )
    proc.start()
    token_file = tmp_path / "hook-token"
    token_file.write_text(TOKEN)
    bed.hook_config.write_text(
        json.dumps(
            {
                "url": f"http://127.0.0.1:{proc.port}/lccn/hooks/drain",
                "token_file": str(token_file),
                "timeout": 120,
                "poll_interval": 0.3,
            }
        )
    )
    loop = Loop(tacker, host_sim, hosts, proc, recorder)
    try:

        def subscribed() -> bool:
            _, _, subs = tacker.call("GET", "/vnflcm/v2/subscriptions")
            return any(s.get("callbackUri") == proc.callback_url for s in subs)

        wait_for(subscribed, timeout=30, interval=0.2, what="serve's own subscription")
        yield loop
    finally:
        bed.hook_config.unlink(missing_ok=True)  # the other tests run without the hook
        for address in list(loop.cut):  # vm_gone took it off the network: later tests need it
            loop.reconnect(address)
        if loop.instantiated:
            loop.terminate()
        proc.stop()
        _, _, subs = tacker.call("GET", "/vnflcm/v2/subscriptions")
        for sub in subs if isinstance(subs, list) else ():
            if sub.get("callbackUri") == proc.callback_url:
                tacker.unsubscribe(sub["id"])


def at(stamp: str) -> float:
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


def test_scale_in_with_the_drain_hook_drains_before_the_vm_goes(
    bed: tb.BedState, hosts: Any, host_sim: SimProcess, hooked_loop: Loop
) -> None:
    loop = hooked_loop
    assert bed.vnfd_id
    loop.instantiate(bed.vnfd_id, "simple")
    out = loop.scale("SCALE_OUT")
    loop.handled(out["id"])
    after = loop.check_agreement()
    # SCALE_OUT asked for nothing: its PROCESSING job ended at the request check.
    shown = loop.serve.event(loop.event_of(out["id"], "PROCESSING") or 0)
    assert Loop.steps(shown)["drain-request"]["status"] == "skipped"

    doomed = next(v for v in loop.vnfcs() if v["vduId"] == "workerNode")  # Tacker's v2 rule
    [gone] = [n for n, m in after.items() if m.vnfc_id == doomed["id"]]
    host_sim.control.clear_calls()
    occ = loop.scale("SCALE_IN")
    assert loop.affected(occ["id"], "REMOVED") == [doomed["id"]]

    # serve's drain job ran on the PROCESSING transition, before Tacker touched Heat.
    processing = loop.serve.event(loop.event_of(occ["id"], "PROCESSING") or 0)
    assert processing["status"] == "done"
    assert processing["jobs"][-1]["handler"] == "cluster-drain"
    steps = Loop.steps(processing)
    assert steps["select-leaving"]["result"]["nodes"] == [gone]
    drain = steps["drain-leaving"]
    assert drain["result"]["drained"] == [gone]
    heat_writes = [
        at(c["at"])
        for c in host_sim.control.calls()
        if c["service"] == "orchestration" and c["method"] in ("PATCH", "PUT", "DELETE")
    ]
    assert heat_writes and drain["finishedAt"] < min(heat_writes), (drain, heat_writes)

    # COMPLETED: nothing left to drain; the cluster, /etc/hosts, inventory and Tacker agree.
    loop.vm_gone(after[gone].address)
    loop.handled(occ["id"])
    final = loop.check_agreement()
    assert set(final) == set(after) - {gone}
    assert gone not in hosts.state()["nodes"]
