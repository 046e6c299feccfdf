"""``lccn-subscriber serve`` beside the bed's real Tacker: :class:`ServeProcess` with a
config file and the CLI reads of its events, :func:`subscribed_serve` (serve subscribes
itself at start), and :func:`serve_config`, the settings with which serve builds
clusters on the real-mode hosts (``k8s`` tier, ``bench/vs_tacker.py``).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Self

import yaml

from tests.testbed import serve, tacker_bed
from tests.testbed.openstack_sim.process import SimProcess
from tests.testbed.tacker_api import TackerClient, wait_for
from tests.testbed.testhosts import SCRIPT_ENV, TestBed

__all__ = ["VIM_KEY", "ServeProcess", "callback_auth", "serve_config", "subscribed_serve"]

VIM_KEY = "k8s"  # serve's tacker.vim_key: the vimConnectionInfo entry it writes back


class ServeProcess(serve.ServeProcess):
    """``lccn-subscriber serve`` as a subprocess on a free port with its own SQLite store.

    Arguments:
        tmp: its directory (store, log, config file).
        config: settings by section, written to ``tmp/serve.yaml`` and given with
            ``--config`` (the listen address and the store stay the flags'); the CLI
            commands run with :meth:`cli` read the same file. ``None``: no config file,
            the defaults.

    :meth:`kill` (SIGKILL) and :meth:`start` again make a restart on the same store
    and port (the callback Tacker knows stays valid); the log is appended to.
    """

    def __init__(self, tmp: Path, config: Mapping[str, Any] | None = None) -> None:
        self.config_args: tuple[str, ...] = ()
        if config is not None:
            config_file = tmp / "serve.yaml"
            config_file.touch(mode=0o600)  # it may hold passwords
            config_file.write_text(
                yaml.safe_dump(json.loads(json.dumps(dict(config), default=str)))
            )
            self.config_args = ("--config", str(config_file))
        args = ("--host", "127.0.0.1", *self.config_args)
        super().__init__(tmp, args=args)
        self.recorded_before = 0  # the recorder's count when serve subscribed

    @property
    def callback_url(self) -> str:
        return self.url

    @property
    def health_url(self) -> str:
        return f"{self.base}/healthz"

    def start(self, timeout: float = 30.0) -> Self:
        """Start it and wait (blocking) until it answers."""
        super().start()

        def ready() -> bool:
            assert self.alive(), self.log_text()
            try:
                # Liveness: the callback itself may want credentials (generated ones when
                # serve subscribes itself).
                status, _, _ = tacker_bed.request("GET", self.health_url, timeout=2)
            except OSError:
                return False
            return status == 200

        wait_for(ready, timeout=timeout, what="lccn-subscriber serve to answer")
        return self

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``lccn-subscriber ARGS --database ... [--config ...]`` (a command that takes them)."""
        out = subprocess.run(
            [*serve.lccn_subscriber(), *args, "--database", self.database, *self.config_args],
            cwd=serve.REPO,
            env=serve.program_env(),
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        if check:
            assert out.returncode == 0, f"lccn-subscriber {' '.join(args)}: {out.stderr}"
        return out

    def events(self) -> list[dict[str, Any]]:
        """``lccn-subscriber events list --format json`` (the CLI contract, not the tables)."""
        out = self.cli("events", "list", "--format", "json", "--limit", "100000")
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    def event(self, event_id: int) -> dict[str, Any]:
        """``lccn-subscriber events show ID``: the event with its jobs and their steps."""
        return json.loads(self.cli("events", "show", str(event_id)).stdout)  # type: ignore[no-any-return]


def callback_auth(proc: ServeProcess) -> str:
    """What serve's /readyz says of callback authentication."""
    _, _, body = tacker_bed.request("GET", f"http://127.0.0.1:{proc.port}/readyz", timeout=5)
    return str(body["checks"]["callback_auth"]["detail"]) if isinstance(body, dict) else ""


@contextlib.contextmanager
def subscribed_serve(
    tacker: TackerClient, tmp_path: Path, config: dict[str, Any], *, timeout: float = 30.0
) -> Iterator[ServeProcess]:
    """``lccn-subscriber serve`` as a subprocess, subscribed to the real Tacker (it subscribes
    itself at start, with generated credentials); at the end stopped and its subscription
    deleted."""
    proc = ServeProcess(tmp_path, config=config)
    proc.start()
    try:
        tacker.wait_subscribed(proc.callback_url, timeout=timeout)
        wait_for(
            lambda: callback_auth(proc) == "callback auth on: BASIC (generated)",
            timeout=10,
            interval=0.2,
            what="callback auth on with the generated credentials",
        )
        yield proc
    finally:
        proc.stop()
        tacker.unsubscribe_all(proc.callback_url)


def serve_config(bed: tacker_bed.BedState, sim: SimProcess, hosts: TestBed) -> dict[str, Any]:
    """serve's settings: noauth Tacker (subscribes on start), the simulator's Keystone,
    the hosts' SSH keys, and the real tools' details through ``cluster`` (etcdctl runs on
    the masters: nothing here can exec into a pod; haproxy is reloaded with the default
    ``systemctl reload haproxy``, which the hosts' systemctl shim does for real)."""
    return {
        "dispatch": {"rescan_interval": 0.5, "backoff_initial": 0.5, "max_attempts": 3},
        "tacker": bed.tacker_section(
            **tacker_bed.QUICK_RETRIES,
            op_poll_interval=0.2,
            subscribe_on_start=True,
            vim_key=VIM_KEY,
        ),
        "openstack": sim.openstack_settings(),
        "ssh": hosts.ssh_section(command_timeout=120.0),
        "cluster": {
            "handlers": "on",
            "script_env": SCRIPT_ENV,
            "token_wait_timeout": 60.0,
            "install_timeout": 300.0,
            "etcdctl_via": "host",
        },
    }
