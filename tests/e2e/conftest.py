"""Fixtures of the ``e2e`` tier: the real Tacker, the real sshd test hosts, and the simulated
OpenStack between them, whose servers get the test hosts' addresses.

The Tacker bed and the test hosts are the other tiers' own session fixtures, imported
rather than copied. Both tiers call theirs ``bed``: here the Tacker bed keeps that name
(``tacker`` and friends ask for it) and the test hosts are ``hosts``. Only the simulator is
ours, because its server pool must be the hosts' addresses (masters first, in order).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.openstack_sim.process import SimProcess
from tests.ssh.conftest import bed as hosts
from tests.tacker.conftest import bed, recorder, tacker
from tests.testbed import testhosts

__all__ = ["bed", "hosts", "recorder", "tacker", "testhosts"]

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.tacker)
            item.add_marker(pytest.mark.ssh)


@pytest.fixture(scope="session")
def host_sim(hosts: Any) -> Iterator[SimProcess]:
    """The simulated OpenStack: each VNFC port takes the next free test host address, the
    cluster VIP the hosts' block's address that nobody answers on (as the ssh tier's HA
    test uses)."""
    proc = SimProcess(
        server_pool=",".join(h.address for h in hosts.hosts),
        vip_pool=hosts.unused_address,
    )
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def fresh_cluster(hosts: Any) -> Iterator[None]:
    """An empty stand-in cluster before the test; the hosts' own names back after it
    (the cluster handlers rename hosts to their node names)."""
    testhosts.reset_cluster(hosts)
    yield
    for host in hosts.hosts:
        subprocess.run(["nsenter", "-t", str(host.pid), "-u", "hostname", host.name], check=False)
