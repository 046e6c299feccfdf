"""serve bounds glibc's malloc arenas unless the environment already does, and gives
freed memory back."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from tests import REPO

_CALL = "from subscriber.heap import limit_malloc_arenas; print(limit_malloc_arenas())"
_TRIM = """
from subscriber.heap import trim_malloc
kept = [bytes(4000) for _ in range(20000)]  # ~80 MB from malloc (over pymalloc's 512 bytes)
del kept[: len(kept) - 1]  # the last one stays: the freed pages are below the heap's top
print(trim_malloc())
"""


def _run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**clean, **env},
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return out.stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_arenas_are_limited_on_glibc_unless_the_environment_says() -> None:
    assert _run(_CALL) == "True"
    assert _run(_CALL, MALLOC_ARENA_MAX="4") == "False"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_freed_memory_is_given_back() -> None:
    assert _run(_TRIM) == "True"
