"""``deploy/systemd/lccn-subscriber.service``: systemd itself accepts it (``systemd-analyze
verify``, with the unit's commands pointed at this checkout's console script), its
hardening keeps systemd's exposure score in the "OK" band, and every command it runs
is one our CLI has."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO

UNIT = REPO / "deploy" / "systemd" / "lccn-subscriber.service"
INSTALLED = "/opt/lccn-subscriber/bin/lccn-subscriber"


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.fail("systemd-analyze is missing (Debian's systemd package has it)")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)


def console_script() -> Path:
    exe = Path(sys.executable).with_name("lccn-subscriber")
    assert exe.exists(), "the package is not installed in this interpreter's environment"
    return exe


def commands() -> list[list[str]]:
    return [
        shlex.split(line.split("=", 1)[1])
        for line in UNIT.read_text().splitlines()
        if line.startswith(("ExecStart=", "ExecStartPre="))
    ]


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace(INSTALLED, str(console_script())))
    out = analyze("verify", str(unit))
    assert out.returncode == 0 and not out.stderr.strip(), out.stderr


def test_its_hardening_keeps_the_exposure_ok() -> None:
    out = analyze("security", "--offline=true", "--threshold=20", str(UNIT))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    text = UNIT.read_text()
    for setting in (
        "User=lccn",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "ReadWritePaths=/var/lib/lccn-subscriber",
        "CapabilityBoundingSet=\n",
    ):
        assert setting in text, setting


def test_it_runs_our_commands_with_no_secret_on_the_command_line() -> None:
    runs = commands()
    assert [run[1:] for run in runs] == [["db", "upgrade"], ["serve"]]
    for run in runs:
        assert run[0] == INSTALLED
        out = subprocess.run(
            [str(console_script()), *run[1:], "--help"], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
