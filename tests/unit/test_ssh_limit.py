"""``ssh.max_connections``: the pool never holds more connections, and calls wait, not fail.

The pool's one seam to asyncssh, ``_connect``, returns an in-memory connection here
whose commands end when the test says so; everything above it (entries, slots,
eviction of idle connections, sessions) is the pool's own code.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from subscriber.config import SshSettings
from subscriber.kernel.ports import SshTarget
from subscriber.ssh import Credentials, SshPool


class _Stream:
    async def read(self, size: int) -> bytes:
        return b""


class _Stdin:
    def write(self, data: bytes) -> None:
        pass

    def write_eof(self) -> None:
        pass


class _Process:
    def __init__(self, gate: asyncio.Event) -> None:
        self.gate = gate
        self.stdin, self.stdout, self.stderr = _Stdin(), _Stream(), _Stream()
        self.exit_status, self.exit_signal = 0, None

    async def wait_closed(self) -> None:
        await self.gate.wait()

    def close(self) -> None:
        pass


class _Connection:
    def __init__(self, fleet: _Fleet, host: str) -> None:
        self.fleet, self.host, self.closed = fleet, host, False

    def is_closed(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.fleet.open -= 1

    async def wait_closed(self) -> None:
        pass

    async def create_process(self, command: str, encoding: Any = None) -> _Process:
        self.fleet.running += 1
        self.fleet.most_running = max(self.fleet.most_running, self.fleet.running)
        process = _Process(self.fleet.gate)
        await asyncio.sleep(0)
        return process


class _Fleet:
    """Every connection the pool opened, and how many are open at once."""

    def __init__(self) -> None:
        self.open = self.most = self.running = self.most_running = 0
        self.gate = asyncio.Event()


class _CountingPool(SshPool):
    def __init__(self, settings: SshSettings, fleet: _Fleet) -> None:
        super().__init__(settings)
        self.fleet = fleet

    async def _connect(self, target: SshTarget, credentials: Credentials) -> Any:
        await asyncio.sleep(0.001)  # connecting takes a moment: others get in meanwhile
        self.fleet.open += 1
        self.fleet.most = max(self.fleet.most, self.fleet.open)
        return _Connection(self.fleet, target.host)


def _settings(limit: int) -> SshSettings:
    return SshSettings(max_connections=limit, host_key_policy="accept-new")


async def test_never_more_connections_than_the_limit_and_calls_wait() -> None:
    fleet = _Fleet()
    targets = [SshTarget(host=f"10.0.0.{i}") for i in range(12)]
    async with _CountingPool(_settings(3), fleet) as pool:
        calls = [
            asyncio.create_task(pool.run(t, "true"), name=f"call-{i}-{t.host}")
            for i in range(3)
            for t in targets
        ]
        async with asyncio.timeout(5):
            while pool.waited == 0 or fleet.running < 3:
                await asyncio.sleep(0.001)
        # Three connections, each running a command that has not ended: the rest wait.
        assert fleet.open == 3 and not any(c.done() for c in calls)
        fleet.gate.set()
        async with asyncio.timeout(10):
            results = await asyncio.gather(*calls)
    assert [r.exit_status for r in results] == [0] * len(calls)  # all ran, none failed
    assert fleet.most == 3 and pool.peak_connections == 3
    assert pool.evicted >= len(targets) - 3  # idle ones were closed to make room
    assert fleet.open == 0  # and stop closed the rest


async def test_a_pooled_connection_is_reused_without_a_new_slot() -> None:
    fleet = _Fleet()
    fleet.gate.set()
    target = SshTarget(host="10.0.0.1")
    async with _CountingPool(_settings(1), fleet) as pool:
        await asyncio.gather(*(pool.run(target, "true") for _ in range(20)))
        assert pool.connects == 1 and pool.waited == 0 and pool.evicted == 0
        await pool.run(SshTarget(host="10.0.0.2"), "true")  # the idle one makes room
        assert pool.connects == 2 and pool.evicted == 1 and fleet.most == 1


async def test_a_failed_connect_gives_its_slot_back() -> None:
    fleet = _Fleet()
    fleet.gate.set()

    class Refusing(_CountingPool):
        async def _connect(self, target: SshTarget, credentials: Credentials) -> Any:
            if target.host == "10.0.0.9":
                raise OSError("refused")
            return await super()._connect(target, credentials)

    async with Refusing(_settings(1), fleet) as pool:
        with pytest.raises(OSError):
            await pool.run(SshTarget(host="10.0.0.9"), "true")
        await pool.run(SshTarget(host="10.0.0.1"), "true")
        assert pool.peak_connections == 1 and pool.waited == 0


async def test_waiters_fail_when_the_pool_stops() -> None:
    fleet = _Fleet()
    pool = _CountingPool(_settings(1), fleet)
    await pool.start()
    first = asyncio.create_task(pool.run(SshTarget(host="10.0.0.1"), "true"), name="first")
    second = asyncio.create_task(pool.run(SshTarget(host="10.0.0.2"), "true"), name="second")
    async with asyncio.timeout(5):
        while pool.waited == 0:
            await asyncio.sleep(0.001)
    await pool.stop()
    fleet.gate.set()
    outcomes = await asyncio.gather(first, second, return_exceptions=True)
    assert isinstance(outcomes[1], RuntimeError) and "stopp" in str(outcomes[1])
