"""The simulator as a child process (``python -m tests.testbed.openstack_sim``).

A process of its own keeps the simulator's event loop out of the tests' loops, and lets
Tacker's calls be answered while a test blocks on Tacker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .app import SimConfig, vim_connection_info
from .control import SimControl

__all__ = ["SimProcess"]

_REPO = Path(__file__).resolve().parents[3]


class SimProcess:
    """Arguments: server_pool / vip_pool: address pools (see :class:`SimConfig`);
    loop_volumes: Cinder volumes get loop devices (see ``volumes.py``)."""

    def __init__(
        self,
        *,
        server_pool: str | None = None,
        vip_pool: str | None = None,
        loop_volumes: bool = False,
    ) -> None:
        defaults = SimConfig()
        self.config = SimConfig(
            server_pool=server_pool or defaults.server_pool,
            vip_pool=vip_pool or defaults.vip_pool,
            loop_volumes=loop_volumes,
        )
        self.proc: subprocess.Popen[Any] | None = None
        self.url = ""
        self.auth_url = ""

    def start(
        self, timeout: float = 30.0, *, log: Path | None = None, new_session: bool = False
    ) -> None:
        """Start and wait for its "listening" line. Raises RuntimeError if started or it dies.

        ``log``: its output goes to this file (read for the listening line) instead of a
        pipe, for a simulator that outlives this object's reader (the Tacker bed's).
        ``new_session``: a session of its own, so a signal to the caller's group misses it.
        """
        if self.proc is not None:
            raise RuntimeError("SimProcess already started")
        cmd = [
            sys.executable,
            "-m",
            "tests.testbed.openstack_sim",
            "--server-pool",
            self.config.server_pool,
            "--vip-pool",
            self.config.vip_pool,
            *(["--loop-volumes"] if self.config.loop_volumes else []),
        ]
        env = {**os.environ, "PYTHONPATH": str(_REPO)}
        if log is None:
            self.proc = subprocess.Popen(
                cmd,
                cwd=_REPO,
                stdout=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
                start_new_session=new_session,
            )
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline()  # blocks until it listens (or dies: "")
        else:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("wb") as out:
                self.proc = subprocess.Popen(
                    cmd,
                    cwd=_REPO,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=new_session,
                )
            line = self._first_line(log, timeout)
        if not line:
            output = log.read_text(errors="replace")[-2000:] if log is not None else ""
            self.stop()
            raise RuntimeError(f"the simulated OpenStack exited during start-up {output}".rstrip())
        info = json.loads(line)
        self.url, self.auth_url = info["url"], info["auth_url"]

    def _first_line(self, log: Path, timeout: float) -> str:
        """The log's first line once written; "" if the process ends or time runs out."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if "\n" in text and text.startswith("{"):
                return text.splitlines()[0]
            time.sleep(0.05)
        return ""

    @property
    def control(self) -> SimControl:
        return SimControl(self.url)

    def openstack_settings(self) -> dict[str, str]:
        """The ``openstack`` settings section (and openstacksdk login) that reach it."""
        return self.config.password_auth(self.auth_url)

    def vim_connection_info(self, key: str = "vim1") -> dict[str, Any]:
        return vim_connection_info(self.auth_url, self.config, key)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
