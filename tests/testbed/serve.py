"""``lccn-subscriber serve`` as a subprocess: :class:`ServeProcess` on a loopback port with
its own store and log, the environment our programs run with (:func:`program_env`) and
the command that starts them (:func:`lccn_subscriber`).

Shared by the tests (``tests/programs.py`` adds what only they use), the Tacker-facing
runner (:mod:`tests.testbed.tacker_serve`) and ``bench/``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

import aiohttp

from tests.testbed.tacker_bed import free_port

__all__ = ["NO_HOME", "REPO", "ServeProcess", "lccn_subscriber", "program_env"]

REPO = Path(__file__).resolve().parents[2]  # the checkout: cwd and PYTHONPATH of our programs

#: Every ``serve`` a test (or a bench) started: any still running at exit is stopped, and
#: named on stderr (a test that leaves one running has a teardown to fix).
_STARTED: list[subprocess.Popen[bytes]] = []


@atexit.register
def _stop_leftovers() -> None:
    for proc in _STARTED:
        if proc.poll() is None:
            print(
                f"tests: a serve was left running: {' '.join(map(str, proc.args))}", file=sys.stderr
            )
            proc.kill()
            proc.wait(10)


#: A home that holds no configuration, outside the checkout: a program run with it may
#: still create its store's lock files there.
NO_HOME = Path(tempfile.mkdtemp(prefix="lccn-no-home-"))


def program_env(extra: Mapping[str, str] | None = None, *, clean: bool = False) -> dict[str, str]:
    """This environment, the checkout on ``PYTHONPATH`` (test handler modules), and ``extra``.

    ``clean``: without this machine's ``LCCN_*`` settings and with a home that holds no
    configuration (the production defaults)."""
    env = {k: v for k, v in os.environ.items() if not (clean and k.startswith("LCCN_"))}
    home = {"LCCN_HOME": str(NO_HOME)} if clean else {}
    return {**env, "PYTHONPATH": str(REPO), **home, **(extra or {})}


def lccn_subscriber() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m subscriber.cli``."""
    exe = Path(sys.executable).with_name("lccn-subscriber")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "subscriber.cli"]


class ServeProcess:
    """``lccn-subscriber serve`` as a subprocess on a loopback port, its output (stdout and
    stderr) appended to :attr:`log`: :meth:`kill` and :meth:`start` again restart it on the
    same store and port (a callback Tacker knows stays valid).

    Arguments:
        tmp: its directory (the logs; the store ``lccn.db`` unless ``database``).
        port: its HTTP port (a free one by default).
        env: variables added to the environment (settings, a test handler's files).
        database: the store's URL (default: the SQLite file ``tmp/lccn.db``).
        args: more ``serve`` arguments (``--role worker``, ``--log-format text``).
        python: interpreter options (``-X importtime``).
        clean: the production defaults (see :func:`program_env`).
    """

    def __init__(
        self,
        tmp: Path,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        *,
        database: str | None = None,
        args: Sequence[str] = (),
        python: Sequence[str] = (),
        clean: bool = False,
    ) -> None:
        self.tmp, self.port, self.env = tmp, port or free_port(), dict(env or {})
        self.db = tmp / "lccn.db"
        self.database = database or f"sqlite+aiosqlite:///{self.db}"
        self._program = [sys.executable, *python, "-m", "subscriber.cli"] if python else None
        self._args = tuple(args)
        self._clean = clean
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tmp / f"serve-{self.port}.log"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The notification callback."""
        return f"{self.base}/lccn/notifications"

    def start(self) -> Self:
        """Start it (again) on :attr:`port` (a test may give it another one first)."""
        with self.log.open("ab") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [
                    *(self._program or lccn_subscriber()),
                    *("serve", "--port", str(self.port), "--database", self.database),
                    *self._args,
                ],
                cwd=REPO,
                env=program_env(self.env, clean=self._clean),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _STARTED.append(self.proc)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def readyz(self, http: aiohttp.ClientSession) -> tuple[int, dict[str, object]]:
        """``GET /readyz``: its status and body."""
        async with http.get(f"{self.base}/readyz") as resp:
            return resp.status, await resp.json()

    async def wait_readiness(self, ready: bool = True, timeout: float = 60) -> dict[str, object]:
        """Wait until ``/readyz`` says ready (200) or not (503); return that body."""
        want = 200 if ready else 503
        async with asyncio.timeout(timeout), aiohttp.ClientSession() as http:
            while True:
                assert self.alive(), self.log_text()[-4000:]
                with contextlib.suppress(aiohttp.ClientError):  # not listening yet
                    status, body = await self.readyz(http)
                    if status == want:
                        return body
                await asyncio.sleep(0.05)

    async def ready(self, timeout: float = 60) -> None:
        """Wait until ``/readyz`` says ready (for ``--role all``: the worker runs jobs too)."""
        await self.wait_readiness(True, timeout)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL: what a crash leaves) and reap the process."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)
            self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM (a graceful stop), SIGKILL after 30 s."""
        if self.alive():
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def rows(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        """A read of the SQLite store."""
        with contextlib.closing(sqlite3.connect(self.db, timeout=10)) as conn:
            return conn.execute(sql, args).fetchall()

    def status(self, op_occ_id: str) -> str | None:
        """The status of the (first) event of ``op_occ_id`` in the SQLite store."""
        rows = self.rows("SELECT status FROM events WHERE vnf_lcm_op_occ_id = ?", op_occ_id)
        return str(rows[0][0]) if rows else None
