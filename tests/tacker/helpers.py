"""Helpers of the ``tacker`` tier (and ``e2e``, ``k8s``): ``serve`` as a process beside the
real Tacker, and additionalParams as Tacker keeps them. Driving Tacker itself is
:mod:`tests.testbed.tacker_api`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests import REPO, programs
from tests.testbed import tacker_bed
from tests.testbed.tacker_api import TackerClient, wait_for

__all__ = [
    "ServeProcess",
    "callback_auth",
    "hooks_pointed_at",
    "k8s_params",
    "subscribed_serve",
]


def k8s_params(flavour: str) -> dict[str, Any]:
    """additionalParams in the v2 guide's shape (our service reads them, Tacker keeps them)."""
    return {
        "k8s_cluster_installation_param": {
            "master_node": {
                "vdu_id": "masterNode",
                "ssh_cp_name": "masterNode_CP1",
                "nic_cp_name": "masterNode_CP1",
                "username": "ubuntu",
                "password": "ubuntu",
                "cluster_cp_name": "vip_CP" if flavour == "complex" else "masterNode_CP1",
            },
            "worker_node": {
                "vdu_id": "workerNode",
                "ssh_cp_name": "workerNode_CP2",
                "nic_cp_name": "workerNode_CP2",
                "username": "ubuntu",
                "password": "ubuntu",
            },
        }
    }


class ServeProcess(programs.ServeProcess):
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

    def start(self, timeout: float = 30.0) -> ServeProcess:
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
            [*programs.lccn_subscriber(), *args, "--database", self.database, *self.config_args],
            cwd=REPO,
            env=programs.program_env(),
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


@contextlib.contextmanager
def hooks_pointed_at(
    bed: tacker_bed.BedState,
    proc: ServeProcess,
    token: str,
    *,
    timeout: float,
    poll_interval: float,
) -> Iterator[None]:
    """Tacker's conductor's hook scripts pointed at ``proc`` (its hook token in a file of
    ``proc``'s directory); at the end the conductor's hook configuration is gone again, so
    that other tests run without the hooks."""
    token_file = proc.tmp / "hook-token"
    token_file.write_text(token)
    bed.hook_config.write_text(
        json.dumps(
            {
                "url": f"http://127.0.0.1:{proc.port}/lccn/hooks",
                "token_file": str(token_file),
                "timeout": timeout,
                "poll_interval": poll_interval,
            }
        )
    )
    try:
        yield
    finally:
        bed.hook_config.unlink(missing_ok=True)
