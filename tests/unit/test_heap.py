"""serve bounds glibc's malloc arenas unless the environment already does."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from tests import REPO

_CALL = "from subscriber.heap import limit_malloc_arenas; print(limit_malloc_arenas())"


def _limited(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run(
        [sys.executable, "-c", _CALL],
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
    assert _limited() == "True"
    assert _limited(MALLOC_ARENA_MAX="4") == "False"
