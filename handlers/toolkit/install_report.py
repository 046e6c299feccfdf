"""What ``install_k8s_cluster.sh`` prints for its caller on the main master.

The script (ours, or the VNF package's ``script_path``, as Tacker's drivers run it)
ends by printing ``token:``, ``server:``, ``ssl_ca_cert_hash:`` and
``certificate_key:`` lines and the cluster CA (PEM); :func:`parse_install_output`
reads them into an :class:`InstallReport`, naming what is missing, never a value.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = ["InstallReport", "parse_install_output"]


class InstallReport(BaseModel):
    """What the main master's ``install_k8s_cluster.sh`` run prints for the caller."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    token: SecretStr
    server: str
    ssl_ca_cert: str = Field(repr=False)
    ssl_ca_cert_hash: str
    certificate_key: SecretStr

    @property
    def endpoint(self) -> str:
        """``host:port`` of ``server``."""
        return self.server.removeprefix("https://").rstrip("/")


_LINE = re.compile(r"^(token|server|ssl_ca_cert_hash|certificate_key):(\S+)\s*$")
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----\n.*?-----END CERTIFICATE-----\n?", re.S)
_TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def parse_install_output(stdout: str) -> InstallReport:
    """The :class:`InstallReport` in a main master's script output.

    Raises:
        ValueError: a line is missing or malformed (values are not echoed).
    """
    found: dict[str, str] = {}
    for line in stdout.splitlines():
        match = _LINE.match(line.strip())
        if match:
            found[match.group(1)] = match.group(2)
    pem = _PEM.search(stdout)
    problems = [
        f"no '{name}:' line"
        for name in ("token", "server", "ssl_ca_cert_hash", "certificate_key")
        if name not in found
    ]
    if pem is None:
        problems.append("no CA certificate (PEM)")
    if not problems:
        if not _TOKEN.match(found["token"]):
            problems.append("token is not a kubeadm bootstrap token")
        if not found["server"].startswith("https://"):
            problems.append("server is not an https URL")
        if not _HEX64.match(found["ssl_ca_cert_hash"]):
            problems.append("ssl_ca_cert_hash is not 64 hex digits")
        if not _HEX64.match(found["certificate_key"]):
            problems.append("certificate_key is not 64 hex digits")
    if problems:
        raise ValueError(f"install_k8s_cluster.sh output: {'; '.join(problems)}")
    assert pem is not None
    return InstallReport(
        token=SecretStr(found["token"]),
        server=found["server"],
        ssl_ca_cert=pem.group(0) if pem.group(0).endswith("\n") else pem.group(0) + "\n",
        ssl_ca_cert_hash=found["ssl_ca_cert_hash"],
        certificate_key=SecretStr(found["certificate_key"]),
    )
