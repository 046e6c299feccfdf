"""A real private container registry for the tests: Debian's ``docker-registry`` (the
CNCF distribution registry, ``scripts/setup.d/60-registry.sh``) with htpasswd basic
auth and TLS, run inside one test host's network namespace.

The test makes the CA and the server certificate (``openssl``; the server's
names are :data:`NAME` and the host's address), the bcrypt htpasswd entry
(``htpasswd -iB``, the password on stdin) and the registry's config in a
directory of its own; :func:`start` waits until the registry answers and
:func:`RegistryServer.stop` ends the process it started.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["NAME", "PORT", "RegistryServer", "missing", "serving", "start"]

NAME = "registry.lccn.test"
PORT = 5000


def missing() -> str | None:
    """Why no registry can run here (a sentence), or ``None``."""
    for tool in ("docker-registry", "htpasswd", "openssl"):
        if shutil.which(tool) is None:
            return f"{tool} missing: run `bash scripts/setup.d/60-registry.sh`"
    return None


@dataclass
class RegistryServer:
    """A running registry: reach it as ``server`` once ``hosts_string`` is in /etc/hosts."""

    address: str
    namespace: str
    username: str
    password: str = field(repr=False)
    root: Path
    ca_pem: bytes
    process: subprocess.Popen[bytes]

    @property
    def server(self) -> str:
        return f"{NAME}:{PORT}"

    @property
    def hosts_string(self) -> str:
        return f"{self.address} {NAME}"

    def log(self) -> str:
        path = self.root / "registry.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def restart(self, *, password: str, timeout: float = 30.0) -> None:
        """The operator fixes the account: ``username`` now has ``password``; the registry
        restarts on the same address, certificate and data (it reads htpasswd at start)."""
        self.stop()
        self.password = password
        _htpasswd(self.root, self.username, password)
        self.process = _spawn(self.namespace, self.root)
        _wait(self, timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _run(*argv: str, input_text: str | None = None, cwd: Path | None = None) -> str:
    proc = subprocess.run(
        argv, input=input_text, capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} {argv[1]} failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def _certificates(root: Path, address: str) -> None:
    _run(
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=lccn test registry CA",
        cwd=root,
    )  # fmt: skip
    _run(
        "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
        "-out", "server.csr", "-subj", f"/CN={NAME}",
        cwd=root,
    )  # fmt: skip
    (root / "san.ext").write_text(
        f"subjectAltName=DNS:{NAME},IP:{address}\nextendedKeyUsage=serverAuth\n"
    )
    _run(
        "openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt",
        cwd=root,
    )  # fmt: skip


def _config(root: Path, address: str) -> Path:
    config = root / "config.yml"
    config.write_text(
        "\n".join(
            [
                "version: 0.1",
                "log:",
                "  level: info",
                "storage:",
                "  filesystem:",
                f"    rootdirectory: {root / 'data'}",
                "http:",
                f"  addr: {address}:{PORT}",
                "  tls:",
                f"    certificate: {root / 'server.crt'}",
                f"    key: {root / 'server.key'}",
                "auth:",
                "  htpasswd:",
                "    realm: lccn-test-registry",
                f"    path: {root / 'htpasswd'}",
                "",
            ]
        )
    )
    return config


def _answers(address: str, ca: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    try:
        with (
            socket.create_connection((address, PORT), timeout=1) as sock,
            context.wrap_socket(sock) as tls,
        ):
            tls.sendall(b"GET /v2/ HTTP/1.0\r\n\r\n")
            return tls.recv(16).startswith(b"HTTP/")
    except OSError:
        return False


def start(
    namespace: str,
    address: str,
    root: Path,
    *,
    username: str,
    password: str,
    timeout: float = 30.0,
) -> RegistryServer:
    """Start a registry on ``address:5000`` inside ``namespace`` (a test host's).

    Raises:
        RuntimeError: a tool failed or the registry did not answer in ``timeout``.
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    _certificates(root, address)
    _htpasswd(root, username, password)
    _config(root, address)
    server = RegistryServer(
        address=address,
        namespace=namespace,
        username=username,
        password=password,
        root=root,
        ca_pem=(root / "ca.crt").read_bytes(),
        process=_spawn(namespace, root),
    )
    _wait(server, timeout)
    return server


@contextlib.contextmanager
def serving(host: Any, root: Path, *, username: str, password: str) -> Iterator[RegistryServer]:
    """A registry in the network namespace of ``host`` (a test host) while the block runs.

    Raises:
        RuntimeError: no registry can run here (:func:`missing` says why), or as :func:`start`.
    """
    if (why := missing()) is not None:
        raise RuntimeError(why)
    server = start(host.namespace, host.address, root, username=username, password=password)
    try:
        yield server
    finally:
        server.stop()


def _htpasswd(root: Path, username: str, password: str) -> None:
    entry = _run("htpasswd", "-niB", username, input_text=password + "\n")
    (root / "htpasswd").write_text(entry.strip() + "\n")


def _spawn(namespace: str, root: Path) -> subprocess.Popen[bytes]:
    with (root / "registry.log").open("ab") as log:
        return subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                namespace,
                "docker-registry",
                "serve",
                str(root / "config.yml"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )


def _wait(server: RegistryServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _answers(server.address, server.root / "ca.crt"):
        if server.process.poll() is not None or time.monotonic() > deadline:
            with contextlib.suppress(Exception):
                server.stop()
            raise RuntimeError(f"docker-registry did not start: {server.log()}")
        time.sleep(0.2)
