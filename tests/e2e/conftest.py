"""Fixtures of the ``e2e`` tier: the real Tacker, the real sshd test hosts, and the simulated
OpenStack between them, whose servers get the test hosts' addresses.

The Tacker bed (``bed``) is the run's one bed, from the root conftest; the test hosts are
the ssh tier's session fixture, imported as ``hosts`` (that tier calls it ``bed``). Only
the simulator is ours, because its server pool must be the hosts' addresses (masters
first, in order). ``serve_proc`` is ``lccn-subscriber serve`` as a subprocess wired to
all three (SIGKILL and restart on the same store for the chaos tests). ``hooked_loop`` is
the loop with Tacker's hooks on: ``serve`` with ``hooks.token`` and Tacker's conductor
pointed at it, so the package's script runs every operation's cluster job inside it.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ssh.conftest import bed as hosts
from tests.tacker.helpers import hooks_pointed_at
from tests.testbed import tacker_bed as tb
from tests.testbed import testhosts
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import CallbackRecorder, TackerClient
from tests.testbed.tacker_serve import ServeProcess, subscribed_serve

from .day2 import Loop

__all__ = [
    "hooked_loop",
    "hosts",
    "reachable",
    "serve_config",
    "testhosts",
    "unreachable",
]


@pytest.fixture(scope="session")
def host_sim(hosts: Any) -> Iterator[SimProcess]:
    """The simulated OpenStack: each VNFC port takes the next free test host address, the
    cluster VIP the hosts' block's address that nobody answers on (as the ssh tier's HA
    test uses)."""
    proc = SimProcess(
        server_pool=",".join(h.address for h in hosts.hosts),
        vip_pool=hosts.unused_address,
        loop_volumes=True,  # Cinder volumes are loop devices (the storage server's)
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


def serve_config(bed: tb.BedState, sim: SimProcess, hosts: Any) -> dict[str, Any]:
    """``serve``'s settings (a config file) for the full loop: the real Tacker (noauth, our
    subscription made at start, with callback credentials serve generates: Tacker
    authenticates every notification), the simulator's Keystone, the test hosts' SSH keys,
    the cluster handlers on the stand-in tools (no packages, no CNI; etcdctl on the host, no
    haproxy process to reload), quick retries."""
    return {
        "auth": {"generate": "basic"},  # the default, said here: the suite runs with it
        "dispatch": {
            "rescan_interval": 0.5,
            "reorder_window": 0.05,
            "backoff_initial": 0.5,
            "max_attempts": 3,
        },
        "tacker": bed.tacker_section(
            **tb.QUICK_RETRIES, op_poll_interval=0.2, subscribe_on_start=True
        ),
        "openstack": sim.openstack_settings(),
        "ssh": hosts.ssh_section(command_timeout=60.0),
        "cluster": {
            "handlers": "on",
            "script_env": {"K8S_SKIP_PHASES": "packages,cni"},
            "token_wait_timeout": 10.0,
            "install_timeout": 120.0,
            "etcdctl_via": "host",
            "haproxy_reload": "",
        },
        "log": {"format": "json", "level": "INFO"},
    }


@pytest.fixture
def serve_proc(
    bed: tb.BedState, tacker: TackerClient, host_sim: SimProcess, hosts: Any, tmp_path: Path
) -> Iterator[ServeProcess]:
    """:func:`subscribed_serve` with this tier's configuration."""
    with subscribed_serve(tacker, tmp_path, serve_config(bed, host_sim, hosts)) as proc:
        yield proc


TOKEN = "e2e-hook-token-0c9d2b"


@pytest.fixture
def hooked_loop(
    bed: tb.BedState,
    tacker: TackerClient,
    host_sim: SimProcess,
    hosts: Any,
    recorder: CallbackRecorder,
    tmp_path: Path,
) -> Iterator[Loop]:
    """serve with the hooks on, and Tacker's conductor pointed at it."""
    proc = ServeProcess(
        tmp_path, config={**serve_config(bed, host_sim, hosts), "hooks": {"token": TOKEN}}
    )
    proc.start()
    with (
        hooks_pointed_at(bed, proc, TOKEN, timeout=240, poll_interval=0.2),
        running_loop(Loop(tacker, host_sim, hosts, proc, recorder)) as loop,
    ):
        yield loop


@contextlib.contextmanager
def running_loop(loop: Loop) -> Iterator[Loop]:
    """``loop`` once its started ``serve`` is subscribed; at the end, whatever the test
    left: the hosts reachable and on the network again, the instance given up (its failed
    op-occ failed for good, terminated, deleted), serve stopped and unsubscribed."""
    tacker, proc, hosts = loop.tacker, loop.serve, loop.hosts
    try:
        tacker.wait_subscribed(proc.callback_url, timeout=60)
        yield loop
    finally:
        hosts.set_join_delay(0.0)
        for host in hosts.hosts:
            reachable(host)
        for address in list(loop.cut):  # vm_gone took it off the network: later tests need it
            loop.reconnect(address)
        if not proc.alive():
            proc.start()
        if loop.inst:
            give_up(loop)
        proc.stop()
        tacker.unsubscribe_all(proc.callback_url)


def give_up(loop: Loop) -> None:
    """Teardown, whatever the test left: a FAILED_TEMP op-occ failed for good, the instance
    terminated if instantiated, then deleted."""
    for occ in loop.tacker.op_occs():
        if occ["vnfInstanceId"] == loop.inst and occ["operationState"] == "FAILED_TEMP":
            loop.tacker.call("POST", f"/vnflcm/v2/vnf_lcm_op_occs/{occ['id']}/fail")
    status, _, shown = loop.tacker.call("GET", f"/vnflcm/v2/vnf_instances/{loop.inst}")
    if status != 200:
        return
    loop.instantiated = shown.get("instantiationState") == "INSTANTIATED"
    loop.terminate()


_RESET_SSH = [
    "iptables",
    "-p",
    "tcp",
    "--dport",
    "22",
    "-j",
    "REJECT",
    "--reject-with",
    "tcp-reset",
]


def unreachable(host: Any) -> None:
    """The host answers SSH with a reset: its open connections break, new ones are refused."""
    subprocess.run(
        ["ip", "netns", "exec", host.namespace, _RESET_SSH[0], "-I", "INPUT", *_RESET_SSH[1:]],
        check=True,
    )


def reachable(host: Any) -> None:
    while (
        subprocess.run(
            ["ip", "netns", "exec", host.namespace, _RESET_SSH[0], "-D", "INPUT", *_RESET_SSH[1:]],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    ):
        pass
