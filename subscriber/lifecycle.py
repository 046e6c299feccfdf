"""One lifecycle for every long-lived component (store, clients, dispatcher, ingress ...).

A :class:`Component` subclass writes two hooks, ``_start()`` and ``_stop()``;
the base does the rest:

* its :class:`State` is an enum; ``start()`` runs once (a second call, or a
  call after ``stop()``, raises ``RuntimeError``);
* if ``_start()`` raises, whatever already started is stopped (the same
  teardown as ``stop()``) and the error is re-raised;
* ``stop()`` is idempotent. It runs ``_stop()`` first (children still run, so
  a drain may use them), then cancels and awaits the owned tasks still
  running, then stops the children in reverse start order. ``_stop()`` also
  runs after a failed ``_start()``, so it must cope with a half-done start;
* background tasks are named and owned (:meth:`Component._spawn`). When one
  dies of an error, its done-callback logs it and either restarts it after a
  bounded exponential backoff (each distinct error is logged once) or, for a
  task the component cannot work without, fails loudly: the component turns
  :attr:`State.FAILED`, :attr:`Component.failure` says why (readiness checks
  report it) and the error is logged at error level;
* a component started and never stopped warns with ``ResourceWarning``;
* ``async with component:`` starts and stops it.

::

    UNOPENED -> STARTING -> RUNNING -> STOPPING -> STOPPED
                   |           |                    ^
                   |           +-> FAILED ----------+  (stop() still needed)
                   +-> (_start raised) -------------+
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
import warnings
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self

__all__ = ["Component", "State", "wait_set"]


async def wait_set(event: asyncio.Event, within: float) -> bool:
    """Wait up to ``within`` seconds for ``event``; whether it was set.

    Not ``asyncio.wait_for(event.wait(), timeout)``: on Python 3.11 that returns
    normally when the task is cancelled in the same turn as the event is set, so the
    cancellation is lost and a loop that waits again never stops (a Kafka source's
    stop hung so in CI).
    """
    try:
        async with asyncio.timeout(within):
            await event.wait()
    except TimeoutError:
        return False
    return True


log = logging.getLogger(__name__)

TaskFactory = Callable[[], Awaitable[None]]


class State(enum.Enum):
    UNOPENED = "unopened"
    STARTING = "starting"
    RUNNING = "running"
    FAILED = "failed"  # a task it cannot work without died; stop() still needed
    STOPPING = "stopping"
    STOPPED = "stopped"


_LIVE = frozenset({State.STARTING, State.RUNNING, State.FAILED, State.STOPPING})


class Component:
    """Base of every component with a start/stop lifecycle (see the module docstring).

    Attributes:
        restart_initial: seconds before the first restart of a crashed task;
            doubled on each further crash, up to ``restart_max``.
        restart_max: the longest restart delay; a task that ran at least this
            long before crashing counts as healthy again (delay and log reset).
    """

    restart_initial: float = 0.5
    restart_max: float = 30.0

    def __init__(self) -> None:
        self._state = State.UNOPENED
        self._lock = asyncio.Lock()
        self._children: list[Component] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Per task name: crashes in a row, last start time, errors already logged.
        self._crashes: dict[str, int] = {}
        self._started_at: dict[str, float] = {}
        self._logged: dict[str, set[str]] = {}
        self.failure: str | None = None

    @property
    def state(self) -> State:
        return self._state

    @property
    def _name(self) -> str:
        return type(self).__name__

    # -- hooks -----------------------------------------------------------------

    async def _start(self) -> None:
        """Acquire resources, start children (:meth:`_start_child`), spawn tasks."""

    async def _stop(self) -> None:
        """Release what ``_start`` acquired (also after a partial ``_start``)."""

    def _on_task_error(self, name: str, exc: BaseException) -> None:
        """Called when task ``name`` died of ``exc``, before the restart or failure."""

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Start the component (once).

        Raises:
            RuntimeError: started before, or stopped.
            Exception: whatever ``_start`` raised, after stopping what it started.
        """
        async with self._lock:
            if self._state is not State.UNOPENED:
                raise RuntimeError(f"{self._name} cannot start: it is {self._state.value}")
            self._state = State.STARTING
            try:
                await self._start()
            except BaseException:
                error = await self._teardown()
                if error is not None:
                    log.error("%s: cleanup after a failed start failed: %r", self._name, error)
                raise
            if self._state is State.STARTING:
                self._state = State.RUNNING

    async def stop(self) -> None:
        """Stop the component and its children (idempotent; waits for a running ``start``).

        Raises:
            Exception: the first error of ``_stop`` or of a child's ``stop``,
                after everything else was stopped.
        """
        async with self._lock:
            if self._state is State.UNOPENED:
                self._state = State.STOPPED
            if self._state is State.STOPPED:
                return
            error = await self._teardown()
        if error is not None:
            raise error

    async def _teardown(self) -> Exception | None:
        self._state = State.STOPPING
        first: Exception | None = None
        try:
            try:
                await self._stop()
            except Exception as exc:
                first = exc
            while self._tasks:
                tasks = list(self._tasks.values())
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            for child in reversed(self._children):
                try:
                    await child.stop()
                except Exception as exc:
                    first = first or exc
            self._children.clear()
        finally:
            self._state = State.STOPPED
        return first

    async def _start_child(self, child: Component) -> None:
        """Start ``child`` now; it is stopped with this component, in reverse start order."""
        await child.start()
        self._children.append(child)

    def _ensure_running(self) -> None:
        """Raises ``RuntimeError`` unless the component is running."""
        if self._state is State.UNOPENED:
            raise RuntimeError(f"{self._name} is not started: start() it first")
        if self._state is not State.RUNNING:
            raise RuntimeError(f"{self._name} is {self._state.value}")

    # -- owned tasks ---------------------------------------------------------------

    def _spawn(self, name: str, factory: TaskFactory, *, restart: bool) -> asyncio.Task[None]:
        """Run ``factory()`` as the owned task ``name``, cancelled and awaited by ``stop()``.

        Arguments:
            name: the task's name (one task per name).
            factory: makes the coroutine; called again for each restart.
            restart: if the task dies of an error, restart it with backoff;
                if false, fail loudly (state FAILED, ``failure`` set).

        Returns:
            the task.
        """
        return self._launch(name, factory, factory(), restart)

    def _launch(
        self, name: str, factory: TaskFactory, coro: Awaitable[None], restart: bool
    ) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks[name] = task
        self._started_at[name] = time.monotonic()
        task.add_done_callback(functools.partial(self._task_done, name, factory, restart))
        return task

    def _task(self, name: str) -> asyncio.Task[None] | None:
        """The owned task ``name`` while it runs (or waits to be restarted)."""
        return self._tasks.get(name)

    async def _cancel_task(self, name: str) -> None:
        """Cancel the owned task ``name`` and wait until it has ended."""
        task = self._tasks.get(name)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _join_task(self, name: str) -> None:
        """Wait until the owned task ``name`` ends on its own (while stopping)."""
        task = self._tasks.get(name)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    def _task_done(
        self, name: str, factory: TaskFactory, restart: bool, task: asyncio.Task[None]
    ) -> None:
        if self._tasks.get(name) is task:
            del self._tasks[name]
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        assert exc is not None
        try:
            self._on_task_error(name, exc)
        except Exception:
            log.exception("%s: the error hook of task %s failed", self._name, name)
        if self._state not in (State.STARTING, State.RUNNING):
            log.error(
                "%s: task %s died while %s", self._name, name, self._state.value, exc_info=exc
            )
            return
        if not restart:
            self.failure = f"{name} died: {type(exc).__name__}: {exc}"
            self._state = State.FAILED
            log.error("%s failed: task %s died", self._name, name, exc_info=exc)
            return
        if time.monotonic() - self._started_at.get(name, 0.0) >= self.restart_max:
            self._crashes[name] = 0
            self._logged.pop(name, None)
        crashes = self._crashes[name] = self._crashes.get(name, 0) + 1
        delay = min(self.restart_max, self.restart_initial * 2 ** (crashes - 1))
        text = f"{type(exc).__name__}: {exc}"
        logged = self._logged.setdefault(name, set())
        if text not in logged:
            logged.add(text)
            log.error(
                "%s: task %s crashed; restarting in %.2gs", self._name, name, delay, exc_info=exc
            )
        else:
            log.debug("%s: task %s crashed again: %s", self._name, name, text)
        self._launch(name, factory, self._restart_after(name, delay, factory), restart)

    async def _restart_after(self, name: str, delay: float, factory: TaskFactory) -> None:
        await asyncio.sleep(delay)
        self._started_at[name] = time.monotonic()
        await factory()

    # -- context manager, leak warning ---------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def __del__(self, _warn: Any = warnings.warn) -> None:
        # _warn bound at definition: module globals may be gone at interpreter exit.
        if getattr(self, "_state", None) in _LIVE:
            _warn(f"unclosed {self!r}: started, never stopped", ResourceWarning, source=self)

    def __repr__(self) -> str:
        return f"<{self._name} {self._state.value}>"
