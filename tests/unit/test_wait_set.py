"""``wait_set``: an event wait with a timeout that never loses a cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from subscriber.lifecycle import wait_set

pytestmark = pytest.mark.asyncio


async def _with_wait_for(event: asyncio.Event, within: float) -> bool:
    try:
        await asyncio.wait_for(event.wait(), within)
    except TimeoutError:
        return False
    return True


async def _loses_a_cancel(wait: Callable[[asyncio.Event, float], Awaitable[bool]]) -> bool:
    """Whether a waiter cancelled (while not yet done) 0-3 loop turns after its event
    was set ever ends without ``CancelledError``."""
    for turns in range(4):
        event = asyncio.Event()
        task = asyncio.create_task(wait(event, 10))
        await asyncio.sleep(0)  # the task waits
        event.set()
        for _ in range(turns):
            await asyncio.sleep(0)
        if task.done():
            continue
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            continue
        return True
    return False


async def test_a_cancel_as_the_event_is_set_is_never_lost() -> None:
    assert not await _loses_a_cancel(wait_set)


async def test_the_control_wait_for_loses_it_on_this_python() -> None:
    """Why ``wait_set`` exists: Python 3.11's ``wait_for`` returns instead (fixed in 3.12)."""
    assert await _loses_a_cancel(_with_wait_for)


async def test_set_and_timeout() -> None:
    event = asyncio.Event()
    assert not await wait_set(event, 0.01)
    event.set()
    assert await wait_set(event, 0.01)
