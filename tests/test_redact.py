"""Secret redaction of stored bodies, logs and command output."""

from __future__ import annotations

import json
import logging

from subscriber.logs import JsonFormatter
from subscriber.redact import redact, redact_text, redact_url

SECRETS = ["hunter2-pw", "bearer-abc-123456789", "client-secret-xyz", "cert-key-0123456789abcdef"]


def test_nested_secret_keys_are_masked_and_shape_kept() -> None:
    data = {
        "additionalParams": {
            "k8s_cluster_installation_param": {
                "master_node": {"username": "ubuntu", "password": SECRETS[0]},
                "private_registry_connection_info": [{"server": "r", "password": SECRETS[0]}],
            }
        },
        "vimConnectionInfo": {
            "k8s": {
                "accessInfo": {"bearer_token": SECRETS[1]},
                "interfaceInfo": {"endpoint": "https://10.0.0.1:6443"},
            }
        },
        "authentication": {
            "paramsOauth2ClientCredentials": {
                "clientId": "c",
                "clientPassword": SECRETS[2],
                "tokenEndpoint": "http://t/token",
            }
        },
        "certificate_key": SECRETS[3],
        "empty_password": "",
    }
    text = json.dumps(redact(data))
    for secret in SECRETS:
        assert secret not in text
    out = redact(data)
    assert (
        out["additionalParams"]["k8s_cluster_installation_param"]["master_node"]["username"]
        == "ubuntu"
    )
    assert out["vimConnectionInfo"]["k8s"]["interfaceInfo"]["endpoint"] == "https://10.0.0.1:6443"
    assert (
        out["authentication"]["paramsOauth2ClientCredentials"]["tokenEndpoint"] == "http://t/token"
    )
    assert out["empty_password"] == ""


def test_secrets_inside_free_text() -> None:
    text = (
        "kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef "
        "Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.c2lnbmF0dXJlLXZhbHVl\n"
        "password=hunter2-pw\n"
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"
    )
    out = redact_text(text)
    assert "hunter2-pw" not in out and "MIIEow" not in out and "eyJzdWIi" not in out
    assert "abcdef.0123456789abcdef" not in out
    assert "kubeadm join 10.0.0.1:6443" in out


def test_url_passwords() -> None:
    assert redact_url("postgresql+asyncpg://u:pw@h/db") == "postgresql+asyncpg://u:***@h/db"
    assert redact_url("sqlite+aiosqlite:////tmp/x.db") == "sqlite+aiosqlite:////tmp/x.db"


def test_json_log_lines_carry_no_secret() -> None:
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "login with password=%s", (SECRETS[0],), None
    )
    record.params = {"password": SECRETS[0], "host": "10.0.0.2"}
    line = JsonFormatter().format(record)
    assert SECRETS[0] not in line
    assert json.loads(line)["params"]["host"] == "10.0.0.2"
