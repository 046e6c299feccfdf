"""``serve``'s two processes: ingest (the parent) and the worker (dispatcher and handlers).

The parent starts the worker as ``lccn-subscriber serve --role worker`` with
one end of a Unix stream socket pair (``--link-fd``). Over it go newline-framed
JSON messages:

* parent -> worker: ``{"wake": [lanes]}`` after every committed append batch
  (``null``: rescan everything), so a new event reaches its lane without
  polling; ``{"metrics": n}`` asks for the job side's Prometheus families.
* worker -> parent: ``{"beat": {...}}`` once a second (the dispatcher's state,
  for the parent's ``/readyz``), ``{"metrics": n, "text": ...}``.

The worker must never outlive the parent: it asks the kernel for SIGKILL when
the parent dies (``PR_SET_PDEATHSIG``), checks the parent is still the one it
was started by, and kills itself when the link reaches end of file (the
parent is gone; a system without ``prctl``). Its lease writes are fenced anyway.
On SIGTERM the parent stops taking notifications first, then sends SIGTERM to
the worker and waits for it (``dispatch.graceful_timeout`` plus a margin).
A worker that dies on its own is restarted with backoff; ``/readyz`` says
``worker`` is down meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from subscriber.health import CheckResult
from subscriber.lifecycle import Component, State
from subscriber.store import AppendedEvent

__all__ = ["ParentLink", "WorkerProcess", "die_with_parent"]

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_BEAT_SECONDS = 1.0
_BEAT_STALE = 5.0
_STOP_MARGIN = 10.0
_LINE_LIMIT = 16 * 1024 * 1024


class WorkerDied(RuntimeError):
    """The worker process exited while the service was running."""


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies; exit now if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    # The parent may have died before prctl: then we were re-parented already.
    if os.getppid() != parent_pid:
        os._exit(1)


def _frame(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class WorkerProcess(Component):
    """The parent's side: starts the worker, wakes it, watches it, asks for its metrics.

    Arguments:
        argv: the worker's command line (``--link-fd`` and ``--parent-pid`` are added).
        graceful_timeout: how long the worker's running steps may take to finish on stop.
    """

    def __init__(self, argv: Sequence[str], graceful_timeout: float) -> None:
        super().__init__()
        self._argv = list(argv)
        self._grace = graceful_timeout
        self._proc: asyncio.subprocess.Process | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._beat: dict[str, Any] | None = None
        self._beat_at = 0.0
        self._asked: dict[int, asyncio.Future[bytes]] = {}
        self._next_ask = 0
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def _start(self) -> None:
        self._spawn("worker", self._supervise, restart=True)

    async def _stop(self) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self._grace + _STOP_MARGIN)
        except TimeoutError:
            log.error("the worker did not stop in time: killed", extra={"pid": proc.pid})
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def _supervise(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            fd = theirs.fileno()
            argv = [*self._argv, "--link-fd", str(fd), "--parent-pid", str(os.getpid())]
            proc = await asyncio.create_subprocess_exec(
                *argv, pass_fds=(fd,), stdin=asyncio.subprocess.DEVNULL
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._proc = proc
        self.starts += 1
        log.info("worker started", extra={"pid": proc.pid})
        reader, writer = await asyncio.open_unix_connection(sock=ours, limit=_LINE_LIMIT)
        self._writer = writer
        # Appends made before the worker listened: its first rescan finds them.
        reading = asyncio.create_task(self._read(reader), name="worker-link")
        try:
            code = await proc.wait()
        finally:
            self._writer = None
            self._beat = None
            writer.close()
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reading
            for future in self._asked.values():
                if not future.done():
                    future.set_result(b"")
            self._asked.clear()
        if self.state in (State.STARTING, State.RUNNING):
            raise WorkerDied(f"the worker process {proc.pid} exited with {code}")
        log.info("worker stopped", extra={"pid": proc.pid, "exit": code})

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            message = json.loads(line)
            if "beat" in message:
                self._beat, self._beat_at = message["beat"], time.monotonic()
            elif "metrics" in message:
                future = self._asked.pop(int(message["metrics"]), None)
                if future is not None and not future.done():
                    future.set_result(str(message.get("text", "")).encode())

    # -- used by the ingest side ------------------------------------------------

    def _send(self, message: dict[str, Any]) -> bool:
        writer = self._writer
        if writer is None or writer.is_closing():
            return False
        writer.write(_frame(message))
        return True

    def wake(self, lane: str | None = None) -> None:
        """Have the worker look at ``lane`` now (``None``: at every lane)."""
        self._send({"wake": None if lane is None else [lane]})

    def on_appended(self, batch: Sequence[AppendedEvent]) -> None:
        """EventStore listener: wake the worker for the lanes of a committed batch."""
        lanes = sorted({e.lane for e in batch if e.lane is not None})
        if lanes:
            self._send({"wake": lanes})

    async def metrics_text(self, within: float = 2.0) -> bytes:
        """The worker's job-side Prometheus families (empty if it does not answer)."""
        self._next_ask += 1
        ask = self._next_ask
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._asked[ask] = future
        if not self._send({"metrics": ask}):
            self._asked.pop(ask, None)
            return b""
        try:
            return await asyncio.wait_for(future, within)
        except TimeoutError:
            self._asked.pop(ask, None)
            return b""

    async def readiness(self) -> CheckResult:
        """``/readyz``'s ``worker`` check: running, its dispatcher running, beating."""
        proc = self._proc
        if proc is None or proc.returncode is not None or self._beat is None:
            return CheckResult(False, "worker process not running")
        age = time.monotonic() - self._beat_at
        if age > _BEAT_STALE:
            return CheckResult(False, f"worker {proc.pid} silent for {age:.0f}s")
        state = str(self._beat.get("state", ""))
        if state not in ("running", "off"):
            detail = self._beat.get("failure") or state
            return CheckResult(False, f"worker {proc.pid}: dispatcher {detail}")
        return CheckResult(True, f"pid {proc.pid}")


class ParentLink(Component):
    """The worker's side: wakes from the parent become dispatcher pokes; beats; metrics.

    Arguments:
        fd: the worker's end of the socket pair.
        poke: the dispatcher's ``poke(lane | None)``.
        status: ``(state, failure)`` of the dispatcher, for the beat.
        metrics: renders the job side's families.
        parent_gone: called once when the link reaches end of file.
    """

    def __init__(
        self,
        fd: int,
        *,
        poke: Callable[[str | None], None],
        status: Callable[[], tuple[str, str | None]],
        metrics: Callable[[], bytes],
        parent_gone: Callable[[], None],
    ) -> None:
        super().__init__()
        self._fd = fd
        self._poke = poke
        self._status = status
        self._metrics = metrics
        self._parent_gone = parent_gone
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None

    async def _start(self) -> None:
        sock = socket.socket(fileno=self._fd)
        self._reader, self._writer = await asyncio.open_unix_connection(
            sock=sock, limit=_LINE_LIMIT
        )
        self._spawn("parent-link", self._read, restart=False)
        self._spawn("beat", self._beat, restart=True)

    async def _stop(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def _send(self, message: dict[str, Any]) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(_frame(message))

    async def _read(self) -> None:
        assert self._reader is not None
        while line := await self._reader.readline():
            message = json.loads(line)
            if "wake" in message:
                lanes = message["wake"]
                if lanes is None:
                    self._poke(None)
                else:
                    for lane in lanes:
                        self._poke(str(lane))
            elif "metrics" in message:
                text = self._metrics().decode()
                self._send({"metrics": message["metrics"], "text": text})
        # The parent is gone (killed): so are we, at once, as with PR_SET_PDEATHSIG; a
        # graceful stop would let an orphan go on running steps. Fencing covers the rest.
        log.error("the serve process that started this worker is gone: exiting now")
        self._parent_gone()
        os.kill(os.getpid(), signal.SIGKILL)

    async def _beat(self) -> None:
        while True:
            state, failure = self._status()
            self._send({"beat": {"state": state, "failure": failure, "pid": os.getpid()}})
            await asyncio.sleep(_BEAT_SECONDS)
