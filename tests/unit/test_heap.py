"""serve bounds glibc's malloc arenas unless the environment already does, and gives
freed memory back."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from schemas import parse_notification
from subscriber.config import DatabaseSettings
from subscriber.store import NewEvent, Store, writer
from subscriber.store import events as event_store
from subscriber.store.database import Database
from tests import REPO
from tests.factories import op_occ

_CALL = "from subscriber.heap import limit_malloc_arenas; print(limit_malloc_arenas())"
_TRIM = """
from subscriber.heap import trim_malloc
kept = [bytes(4000) for _ in range(20000)]  # ~80 MB from malloc (over pymalloc's 512 bytes)
del kept[: len(kept) - 1]  # the last one stays: the freed pages are below the heap's top
print(trim_malloc())
"""

# Objects that outlive two young collections reach the oldest generation; after a
# freeze, CPython's own thresholds then run a full collection every ~70k of them.
_FULL = """
import gc, sys
from subscriber.heap import freeze_long_lived
if sys.argv[1] == "ours":
    freeze_long_lived()
else:
    gc.collect()
    gc.freeze()
full = []
def note(phase, info):
    if phase == "stop" and info["generation"] == 2:
        full.append(info)
gc.callbacks.append(note)
kept = [[] for _ in range(300_000)]
print(len(full))
"""


def _run(code: str, *args: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env={**clean, **env},
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return out.stdout.strip()


def test_after_the_freeze_full_collections_are_rare() -> None:
    """300k surviving containers: no full collection after serve's freeze, against some
    with CPython's thresholds after the same freeze (what the test would see if the
    threshold were lost)."""
    assert _run(_FULL, "ours") == "0"
    assert int(_run(_FULL, "cpython")) >= 2


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_arenas_are_limited_on_glibc_unless_the_environment_says() -> None:
    assert _run(_CALL) == "True"
    assert _run(_CALL, MALLOC_ARENA_MAX="4") == "False"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_freed_memory_is_given_back() -> None:
    assert _run(_TRIM) == "True"


async def test_the_store_writer_trims_once_a_burst_of_writes_is_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest's writer gives back what a stored backlog freed once writes stop, once per
    burst: never while it writes, never again while it stays idle."""
    trims: list[int] = []
    monkeypatch.setattr(writer, "trim_malloc", lambda: trims.append(1) or True)
    monkeypatch.setattr(writer, "IDLE_TRIM_AFTER", 0.05)
    db = Database(DatabaseSettings(url=f"sqlite:///{tmp_path / 'lccn.db'}"))
    queue = writer.WriteQueue(db)
    await queue.start()
    try:
        await asyncio.sleep(0.15)
        assert trims == []  # nothing written yet: nothing to give back
        for _ in range(3):
            await queue.run(lambda conn: conn.exec_driver_sql("SELECT 1").scalar())
        assert trims == []
        await asyncio.sleep(0.3)
        assert trims == [1]
        await queue.run(lambda conn: None)
        await asyncio.sleep(0.3)
        assert trims == [1, 1]
    finally:
        await queue.stop()
        await db.dispose()


async def test_ingest_trims_once_a_burst_of_appends_is_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends go to the database past the write queue: the event writer gives back what
    a stored backlog freed itself, once the appends stop, once per burst."""
    trims: list[int] = []
    monkeypatch.setattr(event_store, "trim_malloc", lambda: trims.append(1) or True)
    monkeypatch.setattr(event_store, "IDLE_TRIM_AFTER", 0.05)
    async with Store(DatabaseSettings(url=f"sqlite:///{tmp_path / 'lccn.db'}")) as store:
        await asyncio.sleep(0.15)
        assert trims == []  # nothing appended yet
        for _ in range(3):
            await asyncio.gather(*(store.events.append(_new()) for _ in range(20)))
        assert trims == []
        await asyncio.sleep(0.3)
        assert trims == [1]
        await asyncio.sleep(0.2)
        assert trims == [1]  # idle: nothing more to give back
        await store.events.append(_new())
        await asyncio.sleep(0.3)
        assert trims == [1, 1]


def _new() -> NewEvent:
    raw = json.dumps(op_occ()).encode()
    return NewEvent(source="http", notification=parse_notification(raw), raw=raw)
