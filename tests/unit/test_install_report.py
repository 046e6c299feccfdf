"""What ``install_k8s_cluster.sh`` prints on the main master, parsed without echoing a value."""

from __future__ import annotations

import pytest

from handlers.toolkit.install_report import parse_install_output

CA = "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIU\n-----END CERTIFICATE-----\n"
HEX = "a" * 64


def test_parse_install_output() -> None:
    text = (
        "[install_k8s_cluster] phase report\n"
        "token:abcdef.0123456789abcdef\nserver:https://10.77.0.2:6443\n"
        f"{CA}ssl_ca_cert_hash:{HEX}\ncertificate_key:{'b' * 64}\n"
    )
    report = parse_install_output(text)
    assert report.token.get_secret_value() == "abcdef.0123456789abcdef"
    assert report.endpoint == "10.77.0.2:6443"
    assert report.ssl_ca_cert == CA
    assert "abcdef.0123" not in repr(report)
    with pytest.raises(ValueError, match=r"no 'server:' line; .*; no CA certificate"):
        parse_install_output("token:abcdef.0123456789abcdef\n")
    with pytest.raises(ValueError, match="token is not a kubeadm bootstrap token") as info:
        parse_install_output(text.replace("abcdef.0123456789abcdef", "SECRETVALUE"))
    assert "SECRETVALUE" not in str(info.value)
