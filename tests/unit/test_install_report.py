"""What ``install_k8s_cluster.sh`` prints on the main master, parsed without echoing a value."""

from __future__ import annotations

import pytest

from handlers.toolkit.install_report import parse_install_output

CA = "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIU\n-----END CERTIFICATE-----\n"
HEX = "a" * 64
# What Tacker's drivers parse, as its sample script prints it (certificate_key apart).
DRIVERS = (
    f"token:abcdef.0123456789abcdef\nserver:https://10.77.0.2:6443\n{CA}ssl_ca_cert_hash:{HEX}\n"
)


def test_parse_install_output() -> None:
    text = f"[install_k8s_cluster] phase report\n{DRIVERS}certificate_key:{'b' * 64}\n"
    report = parse_install_output(text)
    assert report.token.get_secret_value() == "abcdef.0123456789abcdef"
    assert report.endpoint == "10.77.0.2:6443"
    assert report.ssl_ca_cert == CA
    assert report.certificate_key is not None
    assert "abcdef.0123" not in repr(report)
    with pytest.raises(ValueError, match=r"no 'server:' line; .*; no CA certificate"):
        parse_install_output("token:abcdef.0123456789abcdef\n")
    with pytest.raises(ValueError, match="'token:' line is not a kubeadm bootstrap token") as info:
        parse_install_output(text.replace("abcdef.0123456789abcdef", "SECRETVALUE"))
    assert "SECRETVALUE" not in str(info.value)


def test_certificate_key_is_optional_as_for_tackers_drivers() -> None:
    """The drivers read the certificate key from ``kubeadm init phase upload-certs``, not
    from the script: a package's script need not print it."""
    report = parse_install_output(DRIVERS)
    assert report.certificate_key is None and report.ssl_ca_cert_hash == HEX


@pytest.mark.parametrize("line", ["token:", "server:", "ssl_ca_cert_hash:"])
def test_a_missing_line_is_named_in_one_line(line: str) -> None:
    text = "\n".join(x for x in DRIVERS.splitlines() if not x.startswith(line)) + "\n"
    with pytest.raises(ValueError) as info:
        parse_install_output(text)
    message = str(info.value)
    assert message.startswith(f"no '{line}' line in its output")
    assert "\n" not in message and "abcdef.0123" not in message
