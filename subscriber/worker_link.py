"""``serve``'s two processes: ingest (the parent) and the worker (dispatcher and handlers).

The first worker is forked from ``serve`` before its event loop starts, once
every module is imported and the start-up heap is frozen (:func:`fork_worker`):
the two processes share those pages copy-on-write instead of each holding its
own copy. A worker that has to be restarted is started afresh as
``lccn-subscriber serve --role worker`` (``--link-fd``): forking the running,
threaded parent is not safe. Either way the worker holds one end of a Unix
stream socket pair, and lowers its CPU priority (``dispatch.worker_nice``) so
that on a busy machine ingest comes first. Over the socket go newline-framed
JSON messages:

* parent -> worker: ``{"start": true}`` once the parent has started (its store
  migrated, its port bound): the worker waits for it, so a start that fails
  leaves no worker running (:func:`wait_for_start`);
  ``{"wake": [lanes]}`` after every committed append batch
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
from dataclasses import dataclass
from typing import Any

from subscriber.health import CheckResult
from subscriber.lifecycle import Component, State
from subscriber.store import AppendedEvent

__all__ = [
    "ForkedWorker",
    "ParentLink",
    "WorkerProcess",
    "die_with_parent",
    "fork_worker",
    "lower_priority",
    "until_exited",
    "wait_for_start",
]

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_BEAT_SECONDS = 1.0
_BEAT_STALE = 5.0
_STOP_MARGIN = 10.0
_LINE_LIMIT = 16 * 1024 * 1024


class WorkerDied(RuntimeError):
    """The worker process exited while the service was running."""


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies; exit now if it already has.

    Also names the process ``lccn-worker`` (``ps -o comm``, ``top``): a forked worker's
    command line is its parent's.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(b"lccn-worker"), 0, 0, 0)
    # The parent may have died before prctl: then we were re-parented already.
    if os.getppid() != parent_pid:
        os._exit(1)


def lower_priority(increment: int) -> None:
    """Add ``increment`` to this process's niceness (the worker's: jobs yield the CPU to ingest)."""
    if increment > 0:
        try:
            os.nice(increment)
        except OSError as exc:
            log.warning("could not lower the worker's priority: %s", exc)


def wait_for_start(fd: int) -> bool:
    """Block until the parent says ``start`` on the link; ``False`` if it closed it first.

    Read a byte at a time: whatever follows the first line (wake-ups) stays in the
    socket for the link's own reader.
    """
    line = b""
    while not line.endswith(b"\n"):
        try:
            byte = os.read(fd, 1)
        except InterruptedError:
            continue
        if not byte:
            return False
        line += byte
    return bool(json.loads(line).get("start"))


@dataclass(frozen=True, slots=True)
class ForkedWorker:
    """A worker forked by :func:`fork_worker`: its pid and the parent's end of the link."""

    pid: int
    sock: socket.socket


def fork_worker(run: Callable[[int], int]) -> ForkedWorker:
    """Fork the worker now; the child calls ``run(link_fd)`` and exits with what it returns.

    Call it before any thread or event loop exists (``serve`` does, right after its
    imports and settings), so the child starts from a clean, single-threaded copy.
    The child leaves with ``os._exit``: the parent's exit handlers are not its own.
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the worker
        code = 1
        try:
            ours.close()
            code = run(theirs.detach())
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            log.exception("the worker failed")
        finally:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    theirs.close()
    return ForkedWorker(pid, ours)


async def until_exited(pid: int) -> None:
    """Return once the child ``pid`` has exited (not reaped: the caller reaps it).

    A pidfd turns readable when the process exits: no polling, no SIGCHLD handler, and
    no thread waiting (``serve`` forks its worker after waiting for a migration child).
    """
    loop = asyncio.get_running_loop()
    pidfd = os.pidfd_open(pid)
    exited: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, readable)
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


class _Child:
    """The worker as the parent watches it: a forked pid, or an ``asyncio`` subprocess."""

    def __init__(self, pid: int, proc: asyncio.subprocess.Process | None = None) -> None:
        self.pid = pid
        self._proc = proc
        self._exited: asyncio.Future[int] | None = None

    @property
    def returncode(self) -> int | None:
        if self._proc is not None:
            return self._proc.returncode
        if self._exited is not None and self._exited.done():
            return self._exited.result()
        return None

    async def wait(self) -> int:
        """The exit code (negative: the signal), once the worker has exited and been reaped."""
        if self._proc is not None:
            return await self._proc.wait()
        if self._exited is None:
            self._exited = asyncio.ensure_future(self._reap())
        return await asyncio.shield(self._exited)

    async def _reap(self) -> int:
        await until_exited(self.pid)
        # It has exited (a zombie): WNOHANG reaps it at once.
        _, status = os.waitpid(self.pid, os.WNOHANG)  # noqa: ASYNC222
        return os.waitstatus_to_exitcode(status)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


def _frame(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class WorkerProcess(Component):
    """The parent's side: starts the worker, wakes it, watches it, asks for its metrics.

    Arguments:
        argv: the command line of a worker started afresh (``--link-fd`` and
            ``--parent-pid`` are added): a restart, or the first one without ``forked``.
        graceful_timeout: how long the worker's running steps may take to finish on stop.
        forked: the worker :func:`fork_worker` made, waiting to be told to start.
        on_exit: called with the exit code (negative: the signal) when the worker exits on
            its own, while the service runs (``lccn_worker_exits``).
    """

    def __init__(
        self,
        argv: Sequence[str],
        graceful_timeout: float,
        *,
        forked: ForkedWorker | None = None,
        on_exit: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__()
        self._argv = list(argv)
        self._grace = graceful_timeout
        self._forked = forked
        self._on_exit = on_exit
        self._proc: _Child | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._beat: dict[str, Any] | None = None
        self._beat_at = 0.0
        self._asked: dict[int, asyncio.Future[bytes]] = {}
        self._next_ask = 0
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        """The worker process runs and beat within the last few seconds (``lccn_worker_up``)."""
        proc = self._proc
        if proc is None or proc.returncode is not None or self._beat is None:
            return False
        return time.monotonic() - self._beat_at <= _BEAT_STALE

    async def _start(self) -> None:
        self._spawn("worker", self._supervise, restart=True)

    async def _stop(self) -> None:
        forked, self._forked = self._forked, None
        if forked is not None:  # never told to start (a start that failed): it exits on EOF
            forked.sock.close()
            await _Child(forked.pid).wait()
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self._grace + _STOP_MARGIN)
        except TimeoutError:
            log.error("the worker did not stop in time: killed", extra={"pid": proc.pid})
            proc.send_signal(signal.SIGKILL)
            await proc.wait()

    async def _launch_worker(self) -> tuple[_Child, socket.socket]:
        """The forked worker on the first start, else a new ``serve --role worker``."""
        forked, self._forked = self._forked, None
        if forked is not None:
            return _Child(forked.pid), forked.sock
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
        return _Child(proc.pid, proc), ours

    async def _supervise(self) -> None:
        proc, ours = await self._launch_worker()
        self._proc = proc
        self.starts += 1
        log.info("worker started", extra={"pid": proc.pid})
        reader, writer = await asyncio.open_unix_connection(sock=ours, limit=_LINE_LIMIT)
        self._writer = writer
        writer.write(_frame({"start": True}))
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
            if self._on_exit is not None:
                self._on_exit(code)
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
        lanes = list(dict.fromkeys(e.lane for e in batch if e.lane is not None))  # in order
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
