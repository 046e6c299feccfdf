"""Fixtures of the security suite (PostgreSQL and the broker are every tier's): two
sshd hosts, and the tacker tier's simulated OpenStack (a real instantiation needs one).

Each test file here covers one area of issue 29 ("a notification is a claim, Tacker
is the truth"); a test is named after what it prevents and goes through the real
part where the path does (PostgreSQL, the broker, sshd test hosts, Tacker).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tacker.conftest import sim
from tests.testbed import testhosts

__all__ = ["sim", "ssh_bed"]


@pytest.fixture(scope="session")
def ssh_bed() -> Iterator[Any]:
    """Two real sshd hosts in network namespaces (``testhosts.TestBed``), with a password
    user; the bed's client key is authorised for root and that user."""
    if os.geteuid() != 0:
        pytest.fail("the sshd test hosts need root (network namespaces)")
    if not Path(testhosts.SSHD).exists() or shutil.which("unshare") is None:
        pytest.fail("sshd missing: run scripts/setup.d/10-sshd.sh (scripts/test.sh does)")
    bed = testhosts.create(2, password=True)
    try:
        yield bed
    finally:
        testhosts.destroy(bed)
