"""Callback authentication over real HTTP(S) on loopback: BASIC, OAuth 2.0 tokens, mTLS."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import SecretStr

from subscriber.config import (
    AuthSettings,
    BasicAuthSettings,
    DatabaseSettings,
    DispatchSettings,
    HttpSettings,
    MtlsSettings,
    OAuth2Settings,
    Settings,
    TackerSettings,
)
from subscriber.ingest.auth import cert_thumbprint, subscription_authentication
from subscriber.kernel import RoutingTable
from subscriber.service import Service
from tests.conftest import basic, fetch_token, free_port, metric
from tests.factories import op_occ, uid
from tests.recorders import Recorder

ServiceStarter = Callable[..., Any]


@pytest.fixture
async def auth_service(db_url: str) -> AsyncIterator[ServiceStarter]:
    started: list[Service] = []

    async def start(auth: AuthSettings) -> Service:
        registry = RoutingTable()
        registry.register(Recorder())
        settings = Settings(
            http=HttpSettings(host="127.0.0.1", port=free_port()),
            database=DatabaseSettings(url=db_url),
            dispatch=DispatchSettings(rescan_interval=0.5),
            auth=auth,
        )
        svc = Service(settings, routing=registry)
        await svc.start()
        started.append(svc)
        return svc

    yield start
    for svc in started:
        await svc.stop()


async def _stored(svc: Service) -> int:
    return len(await svc.store.events.list())


async def test_basic_accepts_the_right_credentials_and_rejects_others(
    auth_service: ServiceStarter, http: aiohttp.ClientSession
) -> None:
    password = f"pw-{uid()}"
    svc = await auth_service(
        AuthSettings(
            basic=BasicAuthSettings(enabled=True, username="tacker", password=SecretStr(password))
        )
    )
    url = f"http://127.0.0.1:{svc.port}{svc.settings.http.path}"
    for headers in (
        {},
        {"Authorization": basic("tacker", "wrong")},
        {"Authorization": basic("other", password)},
        {"Authorization": "Basic !!notbase64"},
        {"Authorization": f"Bearer {password}"},
    ):
        async with http.post(url, json=op_occ(), headers=headers) as resp:
            assert resp.status == 401, headers
            assert resp.content_type == "application/problem+json"
            assert resp.headers["WWW-Authenticate"].startswith('Basic realm="lccn-subscriber"')
            assert (await resp.json())["status"] == 401
        async with http.get(url, headers=headers) as resp:
            assert resp.status == 401
    assert await _stored(svc) == 0
    good = {"Authorization": basic("tacker", password)}
    async with http.get(url, headers=good) as resp:
        assert resp.status == 204
    async with http.post(url, json=op_occ(), headers=good) as resp:
        assert resp.status == 204
    assert await _stored(svc) == 1
    async with http.get(f"http://127.0.0.1:{svc.port}/metrics") as resp:
        text = await resp.text()
    assert metric(text, 'lccn_auth_failures_total{endpoint="callback"}') == 10
    # The listener counts the guard's answers as it counts the handler's.
    assert metric(text, 'lccn_http_responses_total{endpoint="callback",code="401"}') == 10
    assert metric(text, 'lccn_http_responses_total{endpoint="callback",code="204"}') == 2
    # Health and metrics stay open to the probes.
    async with http.get(f"http://127.0.0.1:{svc.port}/healthz") as resp:
        assert resp.status == 200
    assert subscription_authentication(svc.settings) == {
        "authType": ["BASIC"],
        "paramsBasic": {"userName": "tacker", "password": password},
    }


async def test_oauth2_client_credentials_token_then_bearer(
    auth_service: ServiceStarter, http: aiohttp.ClientSession
) -> None:
    secret = f"cs-{uid()}"
    svc = await auth_service(
        AuthSettings(
            oauth2=OAuth2Settings(
                enabled=True, client_id="tacker", client_password=SecretStr(secret), token_ttl=60
            )
        )
    )
    base = f"http://127.0.0.1:{svc.port}"
    url = base + svc.settings.http.path
    form = {"grant_type": "client_credentials"}
    wrong = await fetch_token(http, base, form, headers={"Authorization": basic("tacker", "nope")})
    assert wrong.status == 401 and wrong.body == {"error": "invalid_client"}
    right = {"Authorization": basic("tacker", secret)}
    assert (await fetch_token(http, base, {"grant_type": "password"}, headers=right)).status == 400
    answer = await fetch_token(http, base, form, headers=right)
    assert answer.status == 200 and answer.headers["Cache-Control"] == "no-store"
    token = answer.body
    assert token["token_type"] == "Bearer" and token["expires_in"] == 60
    bearer = token["access_token"]

    payload, _, sig = bearer.partition(".")
    expired, _ = svc.auth.issue_token("tacker", now=0)
    for bad in (f"{payload}.{sig[:-2]}xx", expired, "garbage", secret):
        async with http.post(url, json=op_occ(), headers={"Authorization": f"Bearer {bad}"}) as r:
            assert r.status == 401
            assert 'error="invalid_token"' in r.headers["WWW-Authenticate"]
    async with http.post(
        url, json=op_occ(), headers={"Authorization": basic("tacker", secret)}
    ) as r:
        assert r.status == 401  # client credentials are for the token endpoint only
    assert await _stored(svc) == 0
    auth = {"Authorization": f"Bearer {bearer}"}
    async with http.get(url, headers=auth) as resp:
        assert resp.status == 204
    async with http.post(url, json=op_occ(), headers=auth) as resp:
        assert resp.status == 204
    assert await _stored(svc) == 1
    block = subscription_authentication(svc.settings)
    assert block == {
        "authType": ["OAUTH2_CLIENT_CREDENTIALS"],
        "paramsOauth2ClientCredentials": {
            "clientId": "tacker",
            "clientPassword": secret,
            "tokenEndpoint": f"http://127.0.0.1:{svc.settings.http.port}/token",
        },
    }


# -- mTLS ----------------------------------------------------------------------------


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Any]:
    """A throwaway CA with a server and a client certificate, and a rogue client."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("lccn test CA", ca_key, "lccn test CA", ca_key, ca=True)
    _write(tmp_path / "ca", ca, ca_key)
    server_key = ec.generate_private_key(ec.SECP256R1())
    _write(
        tmp_path / "server",
        _cert("127.0.0.1", server_key, "lccn test CA", ca_key, server=True),
        server_key,
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert("tacker", client_key, "lccn test CA", ca_key)
    _write(tmp_path / "client", client, client_key)
    rogue_ca_key = ec.generate_private_key(ec.SECP256R1())
    rogue_key = ec.generate_private_key(ec.SECP256R1())
    _write(tmp_path / "rogue", _cert("tacker", rogue_key, "rogue CA", rogue_ca_key), rogue_key)
    return {
        "dir": tmp_path,
        "thumbprint": cert_thumbprint(client.public_bytes(serialization.Encoding.DER)),
    }


def _client_ctx(pki: dict[str, Any], who: str | None) -> ssl.SSLContext:
    d: Path = pki["dir"]
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    if who is not None:
        ctx.load_cert_chain(str(d / f"{who}.crt"), str(d / f"{who}.key"))
    return ctx


def _mtls(pki: dict[str, Any], **settings: Any) -> AuthSettings:
    """mTLS on with the test CA's server certificate, and ``settings``."""
    d: Path = pki["dir"]
    files = {"ca_file": d / "ca.crt", "cert_file": d / "server.crt", "key_file": d / "server.key"}
    return AuthSettings(mtls=MtlsSettings(enabled=True, **files, **settings))


async def test_mtls_requires_a_client_certificate_from_the_ca(
    auth_service: ServiceStarter, pki: dict[str, Any]
) -> None:
    svc = await auth_service(
        _mtls(pki, client_id="tacker-mtls", client_cert_sha256=pki["thumbprint"])
    )
    base = f"https://127.0.0.1:{svc.port}"
    url = base + svc.settings.http.path
    for who in (None, "rogue"):
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientError):
                async with http.post(url, json=op_occ(), ssl=_client_ctx(pki, who)) as resp:
                    pass
    assert await _stored(svc) == 0

    ctx = _client_ctx(pki, "client")
    async with aiohttp.ClientSession() as http:
        # The right certificate, but no token: the OAUTH2_CLIENT_CERT flow wants one.
        async with http.post(url, json=op_occ(), ssl=ctx) as resp:
            assert resp.status == 401
        form = {"grant_type": "client_credentials", "client_id": "someone-else"}
        assert (await fetch_token(http, base, form, ssl=ctx)).status == 401
        form["client_id"] = "tacker-mtls"
        answer = await fetch_token(http, base, form, ssl=ctx)
        assert answer.status == 200
        bearer = answer.body["access_token"]
        headers = {"Authorization": f"Bearer {bearer}"}
        async with http.get(url, headers=headers, ssl=ctx) as resp:
            assert resp.status == 204
        async with http.post(url, json=op_occ(), headers=headers, ssl=ctx) as resp:
            assert resp.status == 204
    assert await _stored(svc) == 1
    block = subscription_authentication(svc.settings)
    assert block is not None and block["authType"] == ["OAUTH2_CLIENT_CERT"]
    assert block["paramsOauth2ClientCert"]["certificateRef"] == {
        "type": "x5t#S256",
        "value": pki["thumbprint"],
    }


async def test_mtls_alone_needs_only_the_certificate(
    auth_service: ServiceStarter, pki: dict[str, Any]
) -> None:
    svc = await auth_service(_mtls(pki))
    url = f"https://127.0.0.1:{svc.port}{svc.settings.http.path}"
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientError):
            async with http.post(url, json=op_occ(), ssl=_client_ctx(pki, "rogue")):
                pass
        async with http.post(url, json=op_occ(), ssl=_client_ctx(pki, "client")) as resp:
            assert resp.status == 204
    assert await _stored(svc) == 1


def test_auth_settings_fail_at_start_when_incomplete(tmp_path: Path) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="username"):
        BasicAuthSettings(enabled=True)
    with pytest.raises(ValidationError, match="client_password"):
        OAuth2Settings(enabled=True, client_id="x")
    with pytest.raises(ValidationError, match="not a file"):
        MtlsSettings(
            enabled=True,
            ca_file=tmp_path / "no",
            cert_file=tmp_path / "no",
            key_file=tmp_path / "no",
        )
    assert subscription_authentication(Settings()) is None


async def test_generated_credentials_work_on_every_replica_of_the_store(
    db_url: str, http: aiohttp.ClientSession
) -> None:
    """Two replicas share one store: a client generated (and recorded) after both started
    gets a token from one and is accepted by the other, at once; the store holds no secret."""
    from subscriber.ingest.credentials import new_credential

    replicas = []
    for _ in range(2):
        settings = Settings(
            http=HttpSettings(host="127.0.0.1", port=free_port()),
            database=DatabaseSettings(url=db_url),
            tacker=TackerSettings(endpoint="http://127.0.0.1:9", subscribe_on_start=True),
        )
        replicas.append(Service(settings, routing=RoutingTable()))
    a, b = replicas
    await a.start()
    await b.start()
    try:
        # subscribe_on_start: credentials are required before any exists.
        url_b = f"http://127.0.0.1:{b.port}{b.settings.http.path}"
        async with http.post(url_b, json=op_occ()) as resp:
            assert resp.status == 401
        record, secret = new_credential("OAUTH2_CLIENT_CREDENTIALS", url_b, "v2")
        await a.store.credentials.add(record)
        form = {"grant_type": "client_credentials"}
        auth = {"Authorization": basic(record.principal, secret)}
        answer = await fetch_token(http, f"http://127.0.0.1:{a.port}", form, headers=auth)
        assert answer.status == 200
        token = answer.body["access_token"]
        async with http.post(
            url_b, json=op_occ(), headers={"Authorization": f"Bearer {token}"}
        ) as resp:
            assert resp.status == 204
        payload, _, sig = token.partition(".")
        forged = f"{payload}.{sig[:-4]}AAAA"
        async with http.post(
            url_b, json=op_occ(), headers={"Authorization": f"Bearer {forged}"}
        ) as resp:
            assert resp.status == 401
        # Client credentials are for the token endpoint only.
        async with http.post(url_b, json=op_occ(), headers=auth) as resp:
            assert resp.status == 401
        assert len(await b.store.events.list()) == 1
    finally:
        await b.stop()
        await a.stop()
    db = Path(db_url.split("///", 1)[1])
    for path in db.parent.glob(db.name + "*"):
        assert secret.encode() not in path.read_bytes()
