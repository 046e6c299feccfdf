"""Chaos, SSH: the connection to a host drops in the middle of a non-idempotent remote step.

INSTANTIATE op-occs stream over HTTP into one ``serve`` (PostgreSQL store);
each COMPLETED runs ``remote-apply`` (tests/chaos/ssh_handler.py) on one sshd
test host in a network namespace: not idempotent, guarded by a marker on the
host, its side-effect log on the host. While some of those commands run, the
host's sshd session processes are killed (SIGKILL): the connection drops at
once, the remote commands go on to the end (they write only to files).

* A step cut off that way fails its job as ``interrupted`` (its effect is
  unknown, so it is not retried blindly); steps started afterwards run over a
  new connection.
* Replayed (``lccn-subscriber replay --all``), the failed events complete:
  the guard finds the work done on the host and skips it.
* The host's log shows every event's work started once (no double run), and
  every acknowledged notification is stored once, every event terminal.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.backends import pg_database, pg_dsn
from tests.chaos.harness import (
    Replica,
    Stream,
    check_store,
    pg_rows,
    settle,
)
from tests.fence_handler import handler_env
from tests.programs import cli
from tests.testbed import testhosts

pytestmark = [pytest.mark.chaos, pytest.mark.ssh, pytest.mark.postgres, pytest.mark.asyncio]

STEP_SECONDS = 1.5


@pytest.fixture
def host_bed() -> Iterator[Any]:
    bed = testhosts.create(1, password=False)
    try:
        yield bed
    finally:
        testhosts.destroy(bed)


def _effects(bed: Any) -> list[tuple[int, str]]:
    log = bed.private_dir(bed.hosts[0], "/tmp") / "lccn-chaos" / "effects.log"
    if not log.exists():
        return []
    return [(int(e), what) for e, _job, what in (ln.split() for ln in log.read_text().splitlines())]


def _starts(bed: Any) -> list[int]:
    return [e for e, w in _effects(bed) if w == "start"]


def _open_runs(bed: Any) -> set[int]:
    effects = _effects(bed)
    return {e for e, w in effects if w == "start"} - {e for e, w in effects if w == "end"}


def _sshd_sessions(listener: int) -> list[int]:
    """The per-connection sshd processes under the host's listening sshd."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(listener, []))
    while todo:
        pid = todo.pop()
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm == "sshd":
            found.append(pid)
            todo.extend(children.get(pid, []))
    return found


async def test_a_dropped_ssh_connection_fails_the_step_clearly_and_a_replay_never_reruns_it(
    tmp_path: Path, host_bed: Any
) -> None:
    effects = tmp_path / "side_effects.txt"
    host = host_bed.hosts[0]
    env = {
        **handler_env(effects, STEP_SECONDS, "tests.chaos.ssh_handler", lease_ttl=10),
        "LCCN_TEST_SSH_HOST": host.address,
        "LCCN_SSH__KNOWN_HOSTS": str(host_bed.known_hosts),
        "LCCN_SSH__CLIENT_KEYS": str(host_bed.client_key),
        "LCCN_SSH__CONNECT_TIMEOUT": "5",
        "LCCN_SSH__COMMAND_TIMEOUT": "30",
    }
    async with pg_database() as url:
        pg = pg_dsn(url)
        serve = Replica("a", tmp_path, url, env)
        stream = Stream(lambda: [serve.url], senders=2, pause=0.05)
        try:
            serve.start()
            await serve.ready()
            stream.start()
            async with asyncio.timeout(60):
                while len(_open_runs(host_bed)) < 3:
                    await asyncio.sleep(0.05)
            cut = _open_runs(host_bed)
            sessions = _sshd_sessions(host.pid)
            assert sessions, "no sshd session to drop"
            for pid in sessions:
                os.kill(pid, signal.SIGKILL)
            await asyncio.sleep(3)  # new steps over a new connection meanwhile
            await stream.stop()
            await settle(pg)
            failed = await pg_rows(
                pg,
                "SELECT e.id, j.error_class, j.last_error FROM events e JOIN jobs j "
                "ON j.event_id = e.id WHERE e.status = 'failed'",
            )
            # The cut-off commands finish on the host; then the operator replays.
            async with asyncio.timeout(30):
                while _open_runs(host_bed):
                    await asyncio.sleep(0.1)
            again = [e for e, n in Counter(_starts(host_bed)).items() if n > 1]
            assert not again, f"remote steps run again after the drop: events {again}"
            assert failed, "no step was cut off by the drop"
            replay = await asyncio.to_thread(cli, "replay", "--all", "--yes", "--database", url)
            assert replay.returncode == 0, replay.stderr
            await settle(pg)
            statuses = Counter(r[0] for r in await pg_rows(pg, "SELECT status FROM events"))
            figures = await check_store(pg, stream.sent, stream.acked, effects)
            skipped = await pg_rows(
                pg, "SELECT COUNT(*) FROM steps WHERE name = 'remote-apply' AND status = 'skipped'"
            )
        finally:
            serve.stop()

    starts = Counter(_starts(host_bed))
    double = sum(n - 1 for n in starts.values() if n > 1)
    completed = sum(1 for b in stream.acked if b["operationState"] == "COMPLETED")
    # The side-effect log of this scenario is the host's.
    figures = replace(figures, side_effects=sum(starts.values()), double_runs=double)
    print(
        figures.line(
            "ssh connection dropped mid-step",
            cut_off=len(cut),
            failed_before_replay=len(failed),
            replay_skipped=skipped[0][0],
        )
    )
    assert {c for _, c, _ in failed} == {"interrupted"}, failed
    assert all("not retried" in (err or "") for _, _, err in failed)
    assert statuses == Counter({"done": sum(statuses.values())}), statuses
    assert double == 0, "a remote step ran twice on the host"
    assert len(starts) == completed, "a COMPLETED was not applied on the host"
    # The runs cut off went on to the end on the host: their replays find them done.
    cut_and_failed = cut & {e for e, _, _ in failed}
    assert cut_and_failed, (cut, failed)
    assert skipped[0][0] >= len(cut_and_failed)
