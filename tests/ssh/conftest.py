"""Real sshd hosts for the ``ssh`` tier: one bed of network namespaces per session.

The bed is created once per test session (about a second) with names unique to
the run, so parallel runs do not clash, and removed at the end, whatever
happened. Tests that build clusters call :func:`testhosts.reset_cluster` first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from subscriber.config import SshSettings
from subscriber.kernel.ports import SshTarget
from subscriber.ssh import SshPool
from tests.testbed import testhosts

HOSTS = 5  # enough for the HA cluster: 3 masters + 2 workers


@pytest.fixture(scope="session")
def bed() -> Iterator[Any]:
    """The session's test hosts (``testhosts.TestBed``)."""
    if os.geteuid() != 0:
        pytest.fail("the ssh tier needs root (network namespaces); run scripts/test.sh as root")
    if not Path(testhosts.SSHD).exists() or shutil.which("unshare") is None:
        pytest.fail("sshd missing: run scripts/setup.d/10-sshd.sh (scripts/test.sh does)")
    test_bed = testhosts.create(HOSTS, password=True)
    try:
        yield test_bed
    finally:
        testhosts.destroy(test_bed)


@pytest.fixture
def ssh_settings(bed: Any) -> SshSettings:
    return SshSettings(
        known_hosts=bed.known_hosts,
        client_keys=(bed.client_key,),
        key_dir=bed.client_key.parent,  # the parameters name the bed's key
        connect_timeout=5.0,
        command_timeout=30.0,
    )


@pytest.fixture
async def pool(ssh_settings: SshSettings) -> AsyncIterator[SshPool]:
    async with SshPool(ssh_settings) as ssh_pool:
        yield ssh_pool


def root_target(bed: Any, index: int = 0) -> SshTarget:
    return SshTarget(host=bed.hosts[index].address, username="root")


@pytest.fixture
def restore_hostnames(bed: Any) -> Iterator[None]:
    """The cluster handlers rename hosts to their node names: give them their names back."""
    yield
    for host in bed.hosts:
        testhosts._run("ip", "netns", "exec", host.namespace, "true")  # namespace still there
        subprocess.run(["nsenter", "-t", str(host.pid), "-u", "hostname", host.name], check=False)
