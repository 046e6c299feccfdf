"""A private PostgreSQL 15 cluster in a temporary directory, for tests that stop or restart it.

The machine's own PostgreSQL is shared with other runs and must never be
restarted; this one belongs to one test: ``initdb`` into a fresh directory,
trust auth, its own free port on 127.0.0.1, its unix socket in that directory.
PostgreSQL refuses to run as root, so as root it runs as the ``postgres`` user.

    with PrivatePostgres() as pg:
        pg.url            # postgresql+asyncpg://postgres@127.0.0.1:PORT/postgres
        pg.restart()      # pg_ctl restart -m fast
        pg.stop(); pg.start()
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

__all__ = ["PG_BIN", "PrivatePostgres"]

PG_BIN = Path(os.environ.get("LCCN_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """One throw-away cluster; removed (stopped, directory deleted) on exit."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="lccn-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self._as_postgres = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str, timeout: float = 60) -> None:
        cmd = [str(PG_BIN / argv[0]), *argv[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{argv[0]} failed: {done.stderr.strip()[-500:]}\n{log}")

    def init(self) -> None:
        if self._as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-N")

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c max_connections=100"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def __enter__(self) -> PrivatePostgres:
        try:
            self.init()
            self.start()
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self.running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
