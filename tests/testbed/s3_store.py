"""A throw-away S3-compatible object store on 127.0.0.1 (moto's server), for Tansu's storage.

Tansu keeps its topics in memory or in S3; a broker whose storage is this
store can be killed (``kill -9``) and started again with its topics, records
and committed offsets intact. Install it with ``bash scripts/setup.d/31-s3.sh``.

    store = start_s3(log=path)      # bucket "tansu" created
    broker = start_broker(storage=store.tansu_url, env=store.client_env)
    ...
    store.stop()
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.testbed.kafka_broker import ServerProcess, free_port, setup_cache, spawn

__all__ = ["S3Store", "moto_server", "start_s3"]

VERSION = "5.2.5"
BUCKET = "tansu"


def moto_server() -> Path:
    """The server binary: ``$LCCN_MOTO_SERVER`` or the setup script's cache."""
    explicit = os.environ.get("LCCN_MOTO_SERVER")
    if explicit:
        return Path(explicit)
    cache = setup_cache()
    binary = cache / f"moto-{VERSION}" / "venv" / "bin" / "moto_server"
    if not binary.exists():
        raise FileNotFoundError(
            f"no S3 store at {binary}: run `bash scripts/setup.d/31-s3.sh` (scripts/test.sh does)"
        )
    return binary


class S3Store(ServerProcess):
    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def tansu_url(self) -> str:
        return f"s3://{BUCKET}/"

    @property
    def client_env(self) -> dict[str, str]:
        """How Tansu's S3 client reaches this store (any key pair: it is not checked)."""
        return {
            "AWS_ACCESS_KEY_ID": "lccn-test",
            "AWS_SECRET_ACCESS_KEY": "lccn-test-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }


def start_s3(*, log: Path | None = None, timeout: float = 30.0) -> S3Store:
    """Start the store, wait until it answers, create the bucket.

    Raises:
        RuntimeError: it exited or did not answer within ``timeout``.
    """
    port = free_port()
    process = spawn([moto_server(), "-H", "127.0.0.1", "-p", port], log)
    store = S3Store(port, process)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited with {process.returncode}")
        try:
            put = urllib.request.Request(f"{store.endpoint}/{BUCKET}", method="PUT")
            with urllib.request.urlopen(put, timeout=2):
                return store
        except (urllib.error.URLError, OSError) as exc:
            if time.monotonic() > deadline:
                store.stop()
                raise RuntimeError(
                    f"moto_server did not answer on {port} within {timeout}s"
                ) from exc
            time.sleep(0.1)
