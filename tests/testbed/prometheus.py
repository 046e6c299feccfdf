"""The real Prometheus for the tests: Debian's ``prometheus`` and ``promtool``
(``scripts/setup.d/70-prometheus.sh``).

:func:`start` runs a Prometheus of the caller's own: a free loopback port, a
temporary storage directory, short scrape and evaluation intervals, the given rule
files, scraping the given ``host:port`` targets' ``/metrics``. :func:`promtool` runs
promtool. The package's own service is never used.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["JOB", "Prometheus", "missing", "promtool", "start"]

#: The scrape job's name: the ``job`` label of every series it scrapes.
JOB = "lccn-subscriber"


def missing() -> str | None:
    """Why no Prometheus can run here (a sentence), or ``None``."""
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            return f"{tool} missing: run `bash scripts/setup.d/70-prometheus.sh`"
    return None


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS`` run to its end, output as text."""
    return subprocess.run(
        ["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Prometheus:
    """A running Prometheus; its HTTP API at :attr:`base`."""

    port: int
    root: Path
    process: subprocess.Popen[bytes]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        path = self.root / "prometheus.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def api(self, path: str) -> Any:
        """``GET /api/v1/{path}``: its ``data`` (raises when the answer is an error)."""
        with urllib.request.urlopen(f"{self.base}/api/v1/{path}", timeout=10) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus /api/v1/{path}: {body}")
        return body["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts of its rules that are pending or firing now."""
        found: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start(
    root: Path,
    targets: Sequence[str],
    rule_files: Sequence[Path] = (),
    *,
    interval: float = 1.0,
    timeout: float = 30.0,
) -> Prometheus:
    """Start Prometheus in ``root`` (its config, storage and log), scraping ``targets``
    (``host:port``) every ``interval`` seconds and evaluating ``rule_files`` as often;
    return once it is ready (``/-/ready``).

    Raises:
        RuntimeError: it exited or was not ready within ``timeout``.
    """
    root.mkdir(parents=True, exist_ok=True)
    every = f"{max(1, round(interval * 1000))}ms"
    config = {
        "global": {
            "scrape_interval": every,
            "scrape_timeout": every,
            "evaluation_interval": every,
        },
        "rule_files": [str(p.resolve()) for p in rule_files],
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": list(targets)}]}],
    }
    # JSON is YAML: no YAML writer needed.
    (root / "prometheus.yml").write_text(json.dumps(config, indent=2))
    port = _free_port()
    with (root / "prometheus.log").open("ab") as log:
        process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(port, root, process)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited with {process.returncode}: {server.log()}")
        try:
            with urllib.request.urlopen(f"{server.base}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"prometheus not ready within {timeout:g}s: {server.log()}")
        time.sleep(0.1)
