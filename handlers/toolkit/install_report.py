"""What ``install_k8s_cluster.sh`` prints for its caller on the main master.

The script (the VNF package's ``script_path``, as Tacker's drivers run it, or our
own) ends by printing ``token:``, ``server:`` and ``ssl_ca_cert_hash:`` lines and
the cluster CA (PEM): what Tacker's drivers parse (``kubernetes_mgmt.py`` and the v2
``kubernetes_mgmt_v2.py``), so what a package's script must print. Ours and Tacker's
sample also print ``certificate_key:``, which Tacker's drivers do not read (they upload
the certificates again for each control-plane join); we join the other masters of the
same job run with it (kept in memory), and upload them again only when a script printed
none: it is optional.
:func:`parse_install_output` reads them into an :class:`InstallReport`, naming the
line it expected, never a value.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = ["EXPECTED", "InstallReport", "parse_install_output"]

# The lines Tacker's drivers read from the main master's output, in its order.
EXPECTED = ("token:", "server:", "ssl_ca_cert_hash:")


class InstallReport(BaseModel):
    """What the main master's ``install_k8s_cluster.sh`` run prints for the caller."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    token: SecretStr
    server: str
    ssl_ca_cert: str = Field(repr=False)
    ssl_ca_cert_hash: str
    certificate_key: SecretStr | None = None

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
        ValueError: a line is missing or malformed, in one line naming the line it
            expected (values are not echoed).
    """
    found: dict[str, str] = {}
    for line in stdout.splitlines():
        match = _LINE.match(line.strip())
        if match:
            found[match.group(1)] = match.group(2)
    pem = _PEM.search(stdout)
    problems = [f"no '{line}' line" for line in EXPECTED if line[:-1] not in found]
    if pem is None:
        problems.append("no CA certificate (-----BEGIN CERTIFICATE-----)")
    if not problems:
        if not _TOKEN.match(found["token"]):
            problems.append("the 'token:' line is not a kubeadm bootstrap token")
        if not found["server"].startswith("https://"):
            problems.append("the 'server:' line is not an https URL")
        if not _HEX64.match(found["ssl_ca_cert_hash"]):
            problems.append("the 'ssl_ca_cert_hash:' line is not 64 hex digits")
        if "certificate_key" in found and not _HEX64.match(found["certificate_key"]):
            problems.append("the 'certificate_key:' line is not 64 hex digits")
    if problems:
        raise ValueError(
            f"{'; '.join(problems)} in its output (Tacker's drivers parse "
            f"{', '.join(repr(x) for x in EXPECTED)} lines and the CA certificate)"
        )
    assert pem is not None
    key = found.get("certificate_key")
    return InstallReport(
        token=SecretStr(found["token"]),
        server=found["server"],
        ssl_ca_cert=pem.group(0) if pem.group(0).endswith("\n") else pem.group(0) + "\n",
        ssl_ca_cert_hash=found["ssl_ca_cert_hash"],
        certificate_key=SecretStr(key) if key is not None else None,
    )
