"""podman as this tier drives it (``scripts/setup.d/71-podman.sh`` installs it and the base).

On these machines podman needs runc (crun cannot start containers on cgroups v1) and
lower default ulimits than podman's own: a containers.conf of the test's own, given
through ``CONTAINERS_CONF`` (the machine's ``/etc/containers`` is never edited).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["BASE", "Podman", "missing"]

#: The base image the setup script makes from Debian's packages (no registry is reachable).
BASE = "localhost/debian-python:bookworm"

_CONF = """\
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]

[engine]
runtime = "runc"
"""


def missing() -> str | None:
    """Why no image can be built and run here (a sentence), or ``None``."""
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} missing: run `bash scripts/setup.d/71-podman.sh`"
    found = subprocess.run(["podman", "image", "exists", BASE], capture_output=True, check=False)
    if found.returncode != 0:
        return f"the base image {BASE} is missing: run `bash scripts/setup.d/71-podman.sh`"
    return None


class Podman:
    """Runs ``podman`` with a containers.conf of its own, written in ``root``."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.conf = root / "containers.conf"
        self.conf.write_text(_CONF)

    def __call__(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``podman ARGS`` run to its end, output as text; ``check``: fail on a non-zero exit
        with podman's output in the message."""
        done = subprocess.run(
            ["podman", *args],
            env={**os.environ, "CONTAINERS_CONF": str(self.conf)},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args[:3])} ... exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done
