"""Secret redaction of stored bodies, logs and command output."""

from __future__ import annotations

import json
import logging
import random
import uuid

from subscriber.logs import JsonFormatter
from subscriber.redact import (
    _may_hold_secret_text,
    may_hold_secret,
    redact,
    redact_text,
    redact_url,
)

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


def test_bodies_without_secret_words_are_kept_verbatim_and_others_redacted() -> None:
    from schemas import parse_notification
    from subscriber.store.records import NewEvent
    from tests.factories import op_occ

    plain = json.dumps(op_occ(state="STARTING", verbosity="SHORT")).encode()
    new = NewEvent("http", parse_notification(plain), raw=plain)
    assert new.stored_body() == plain.decode()  # byte for byte what Tacker sent

    full = op_occ(operation="MODIFY_INFO", state="COMPLETED")
    raw = json.dumps(full).encode()
    stored = NewEvent("http", parse_notification(raw), raw=raw).stored_body()
    assert "s3cr3t-bearer-TOKEN-value" not in stored
    assert json.loads(stored)["changedInfo"]["vimConnectionInfo"]["k8s"]["accessInfo"] == {
        "bearer_token": "***"
    }
    # A key spelled with JSON escapes still reaches the redactor.
    sneaky = raw.replace(b'"bearer_token"', b'"\\u0062earer_\\u0074oken"')
    stored = NewEvent("http", parse_notification(sneaky), raw=sneaky).stored_body()
    assert "s3cr3t-bearer-TOKEN-value" not in stored
    # Keys that name a secret only once '_' and '-' are dropped, or once lower-cased
    # as str.lower() does it (the Kelvin sign), as is_secret_key reads them.
    for key in ("p_assword", "to-ken", "\u212aey"):
        body = {**full, "changedInfo": {"vimConnectionInfo": {"k8s": {key: "hunter2-pw"}}}}
        raw = json.dumps(body, ensure_ascii=False).encode()
        stored = NewEvent("http", parse_notification(raw), raw=raw).stored_body()
        assert "hunter2-pw" not in stored, key


def test_lists_under_secret_keys_and_short_strings_are_masked() -> None:
    from subscriber.redact import redact

    data = {
        "password": ["hunter2", "s3cr3t-2"],
        "tokens": ["abc", {"token": "d"}, {"name": "kept"}],
        "note": "token=x1",  # 8 characters
        "short": "pwd=a1",  # shorter than 8
        "keep": ["plain", 3, None],
        "secret": [],
    }
    out = redact(data)
    assert out["password"] == ["***", "***"]
    assert out["tokens"] == ["***", {"token": "***"}, {"name": "kept"}]
    assert "x1" not in out["note"]
    assert out["keep"] == ["plain", 3, None] and out["secret"] == []
    assert redact("token=x") == "token=***"  # a bare short string


def test_config_show_masks_urls_and_secret_keys_anywhere() -> None:
    from subscriber.config import (
        ClusterSettings,
        KafkaSettings,
        OpenStackSettings,
        Settings,
        masked,
    )

    settings = Settings(
        openstack=OpenStackSettings(
            auth_url="https://admin:Keyst0ne-pw@keystone.example:5000/v3",
            username="lccn",
            project_name="nfv",
        ),
        cluster=ClusterSettings(
            script_env={
                "https_proxy": "http://proxyuser:Pr0xy-pw@proxy:3128",
                "REGISTRY_TOKEN": "tok-12345",
                "K8S_VERSION": "1.26.8",
            }
        ),
        kafka=KafkaSettings(bootstrap_servers=["kafka-1:9092"]),
    )
    shown = str(masked(settings))
    for secret in ("Keyst0ne-pw", "Pr0xy-pw", "tok-12345"):
        assert secret not in shown
    data = masked(settings)
    assert data["openstack"]["auth_url"] == "https://admin:***@keystone.example:5000/v3"
    assert data["cluster"]["script_env"]["K8S_VERSION"] == "1.26.8"
    assert data["cluster"]["script_env"]["REGISTRY_TOKEN"] == "***"
    assert data["auth"]["oauth2"]["token_path"] == "/token"  # a field name is no secret


_NEEDLES = ["pass", "pwd", "secret", "token", "key", "auth", "cookie", "credential"]
_NEEDLES += ["bearer", "basic", "eyj", "\\u"]


def _spelled(rng: random.Random, word: str) -> str:
    """``word`` in random case, with '_' or '-' between some of its letters."""
    out = []
    for ch in word:
        out.append(ch.upper() if rng.random() < 0.3 else ch)
        if rng.random() < 0.15:
            out.append(rng.choice("_-"))
    return "".join(out)


def test_may_hold_secret_finds_every_needle_however_spelled() -> None:
    rng = random.Random(31)
    for needle in _NEEDLES:
        for _ in range(50):
            text = f'{{"id":"{uuid.uuid4()}","{_spelled(rng, needle)}":1}}'
            assert may_hold_secret(text), text
    # str.lower() maps the Kelvin sign to "k": is_secret_key reads it as "key".
    assert may_hold_secret('{"\u212aey": "x"}')


def test_may_hold_secret_is_never_false_where_the_plain_check_is_true() -> None:
    """Against the reference (the lower-cased text, '_' and '-' dropped, one scan per
    needle): dropping more bytes first may only add matches."""
    rng = random.Random(7)
    pieces = [*_NEEDLES, "a", "e", "s", "k", "y", "o", "_", "-", ":", '"', "0", "f", "\u212a", "é"]
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        text = _spelled(rng, text)
        if _may_hold_secret_text(text):
            assert may_hold_secret(text), text


def test_a_notification_without_secrets_takes_the_fast_path() -> None:
    """A FULL notification with no secret in it (as Tacker v2 sends one) is stored as
    received, not decoded and redacted: the check must not find a needle in it."""
    instance, op_occ, base = str(uuid.uuid4()), str(uuid.uuid4()), "http://192.0.2.1:9890"
    body = {
        "id": str(uuid.uuid4()),
        "notificationType": "VnfLcmOperationOccurrenceNotification",
        "subscriptionId": str(uuid.uuid4()),
        "timeStamp": "2026-11-22T03:50:00Z",
        "notificationStatus": "RESULT",
        "operationState": "COMPLETED",
        "vnfInstanceId": instance,
        "operation": "INSTANTIATE",
        "isAutomaticInvocation": False,
        "vnfLcmOpOccId": op_occ,
        "verbosity": "FULL",
        "affectedVnfcs": [
            {
                "id": str(uuid.uuid4()),
                "vduId": vdu,
                "vnfdId": str(uuid.uuid4()),
                "changeType": "ADDED",
                "computeResource": {
                    "resourceId": str(uuid.uuid4()),
                    "vimLevelResourceType": "OS::Nova::Server",
                },
                "metadata": {"stack_id": str(uuid.uuid4())},
            }
            for vdu in ("masterNode", "workerNode", "workerNode")
        ],
        "_links": {
            "vnfInstance": {"href": f"{base}/vnflcm/v2/vnf_instances/{instance}"},
            "vnfLcmOpOcc": {"href": f"{base}/vnflcm/v2/vnf_lcm_op_occs/{op_occ}"},
        },
    }
    text = json.dumps(body)
    assert not may_hold_secret(text)
