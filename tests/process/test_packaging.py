"""An installed wheel carries what the handlers upload to the nodes.

A wheel is built from the checkout and installed, without the checkout, into a
fresh virtual environment; the toolkit's upload step must find the node-side
files there (importlib.resources, not a path beside the source tree), and the
CLI must start.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO

pytestmark = pytest.mark.timeout(600)


def test_the_wheel_ships_the_node_files(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("lccn_subscriber-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # Dependencies from the registry (pip's cache makes this quick after the first time).
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        check=True,
        capture_output=True,
    )
    probe = (
        "import handlers, handlers.toolkit.hosts as h; "
        "from subscriber.config import ClusterSettings; s = ClusterSettings(); "
        "files = [h.node_file(s, n) for n in h.NODE_FILES]; "
        "print(handlers.__file__); print(files[0].splitlines()[0].decode()); "
        "print(b'kind: Secret' in files[1])"
    )
    out = subprocess.run(
        [str(python), "-c", probe], cwd=tmp_path, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert out[0].startswith(str(venv)), out  # the installed copy, not the checkout
    assert out[1] == "#!/usr/bin/env bash" and out[2] == "True"
    cli = subprocess.run(
        [str(venv / "bin" / "lccn-subscriber"), "handlers", "list", "--format", "json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"LCCN_CLUSTER__HANDLERS": "on", "PATH": "/usr/bin:/bin"},
    )
    assert cli.returncode == 0, cli.stderr
    assert '"cluster-scale"' in cli.stdout
