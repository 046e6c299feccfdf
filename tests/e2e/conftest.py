"""Fixtures of the ``e2e`` tier: the real Tacker, the real sshd test hosts, and the simulated
OpenStack between them, whose servers get the test hosts' addresses.

The Tacker bed (``bed``) is the run's one bed, from the root conftest; the test hosts are
the ssh tier's session fixture, imported as ``hosts`` (that tier calls it ``bed``). Only
the simulator is ours, because its server pool must be the hosts' addresses (masters
first, in order).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.openstack_sim.process import SimProcess
from tests.ssh.conftest import bed as hosts
from tests.testbed import testhosts

__all__ = ["hosts", "testhosts"]

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
