"""Fixtures of the ``e2e`` tier: the real Tacker, the real sshd test hosts, and the simulated
OpenStack between them, whose servers get the test hosts' addresses.

The Tacker bed (``bed``) is the run's one bed, from the root conftest; the test hosts are
the ssh tier's session fixture, imported as ``hosts`` (that tier calls it ``bed``). Only
the simulator is ours, because its server pool must be the hosts' addresses (masters
first, in order). ``serve_proc`` is ``lccn-subscriber serve`` as a subprocess wired to
all three (SIGKILL and restart on the same store for the chaos tests).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import tacker_bed as tb
from testbed import testhosts
from testbed.openstack_sim.process import SimProcess
from testbed.tacker_api import TackerClient, wait_for
from tests.ssh.conftest import bed as hosts
from tests.tacker.helpers import ServeProcess

__all__ = ["callback_auth", "hosts", "serve_config", "testhosts"]


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
        "tacker": {
            "endpoint": bed.url,
            "noauth_user_id": tb.USER_ID,
            "noauth_project_id": tb.PROJECT_ID,
            "retry_attempts": 20,
            "retry_initial": 0.1,
            "retry_max": 1.0,
            "op_poll_interval": 0.2,
            "subscribe_on_start": True,
        },
        "openstack": sim.openstack_settings(),
        "ssh": {
            "known_hosts": str(hosts.known_hosts),
            "client_keys": [str(hosts.client_key)],
            "key_dir": str(hosts.client_key.parent),
            "connect_timeout": 5.0,
            "command_timeout": 60.0,
        },
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


def callback_auth(proc: ServeProcess) -> str:
    """What serve's /readyz says of callback authentication."""
    _, _, body = tb.request("GET", f"http://127.0.0.1:{proc.port}/readyz", timeout=5)
    return str(body["checks"]["callback_auth"]["detail"]) if isinstance(body, dict) else ""


@pytest.fixture
def serve_proc(
    bed: tb.BedState, tacker: TackerClient, host_sim: SimProcess, hosts: Any, tmp_path: Path
) -> Iterator[ServeProcess]:
    """``lccn-subscriber serve`` as a subprocess, subscribed to the real Tacker (it subscribes
    itself at start); at teardown stopped and its subscription deleted."""
    proc = ServeProcess(tmp_path, config=serve_config(bed, host_sim, hosts))
    proc.start()
    try:

        def subscribed() -> bool:
            _, _, subs = tacker.call("GET", "/vnflcm/v2/subscriptions")
            return any(s.get("callbackUri") == proc.callback_url for s in subs)

        wait_for(subscribed, timeout=30, interval=0.2, what="serve's own subscription")
        wait_for(
            lambda: callback_auth(proc) == "callback auth on: BASIC (generated)",
            timeout=10,
            interval=0.2,
            what="callback auth on with the generated credentials",
        )
        yield proc
    finally:
        proc.stop()
        _, _, subs = tacker.call("GET", "/vnflcm/v2/subscriptions")
        for sub in subs if isinstance(subs, list) else ():
            if sub.get("callbackUri") == proc.callback_url:
                tacker.unsubscribe(sub["id"])
