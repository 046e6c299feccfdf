"""Callback authentication: what Tacker can send (TACKER.md §3), checked on our side.

* ``BASIC``: ``Authorization: Basic`` with ``auth.basic`` credentials
  (constant-time comparison).
* ``OAUTH2_CLIENT_CREDENTIALS``: this service is the token endpoint. Tacker
  POSTs ``grant_type=client_credentials`` with HTTP Basic client credentials to
  ``auth.oauth2.token_path`` and gets a short-lived bearer token, which every
  callback then carries. Tokens are HMAC-signed (key derived from the client
  password), not stored: any replica with the same configuration accepts them.
* mTLS: the listener requires a client certificate signed by
  ``auth.mtls.ca_file`` (the TLS handshake rejects anything else). With
  ``auth.mtls.client_id`` the token endpoint also serves Tacker's
  ``OAUTH2_CLIENT_CERT`` flow (token for ``client_id`` over mTLS, optionally
  pinned to a certificate thumbprint).

A rejected callback gets 401 ProblemDetails with ``WWW-Authenticate`` and is
not stored; the failure is counted (``lccn_auth_failures``). Credentials are
never logged. The test notification (GET) is checked the same way: Tacker
sends the same authentication on it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from subscriber.config import AuthSettings, Settings
from subscriber.errors import ConfigError
from subscriber.ingest.problems import problem_response
from subscriber.metrics import Metrics

__all__ = [
    "CallbackAuth",
    "build_ssl_context",
    "cert_thumbprint",
    "subscription_authentication",
]

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def cert_thumbprint(der: bytes) -> str:
    """The ``x5t#S256`` of a DER certificate: base64url(SHA-256), no padding."""
    return _b64url(hashlib.sha256(der).digest())


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


def build_ssl_context(settings: AuthSettings) -> ssl.SSLContext | None:
    """The listener's TLS context with client certificates required, or ``None`` (plain HTTP).

    Raises:
        ConfigError: a file cannot be read or holds no usable certificate/key.
    """
    mtls = settings.mtls
    if not mtls.enabled:
        return None
    assert mtls.ca_file and mtls.cert_file and mtls.key_file  # validated by the settings
    try:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(mtls.ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"auth.mtls.ca_file {mtls.ca_file}: {_reason(exc)}") from exc
    try:
        ctx.load_cert_chain(str(mtls.cert_file), str(mtls.key_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"auth.mtls.cert_file {mtls.cert_file} / key_file {mtls.key_file}: {_reason(exc)}"
        ) from exc
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def token_endpoint_url(settings: Settings) -> str:
    """Where Tacker should ask for tokens."""
    oauth2 = settings.auth.oauth2
    if oauth2.token_endpoint:
        return oauth2.token_endpoint
    scheme = "https" if settings.auth.mtls.enabled else "http"
    return f"{scheme}://{settings.http.host}:{settings.http.port}{oauth2.token_path}"


def subscription_authentication(settings: Settings) -> dict[str, Any] | None:
    """The SOL003 ``authentication`` block of a subscription request matching our config.

    Returns ``None`` when the callback takes no credentials. Tacker picks
    OAUTH2_CLIENT_CERT over OAUTH2_CLIENT_CREDENTIALS over BASIC when several
    are offered; we accept any of them.
    """
    auth = settings.auth
    types: list[str] = []
    block: dict[str, Any] = {}
    if auth.basic.enabled:
        types.append("BASIC")
        block["paramsBasic"] = {
            "userName": auth.basic.username,
            "password": auth.basic.password.get_secret_value(),
        }
    if auth.oauth2.enabled:
        types.append("OAUTH2_CLIENT_CREDENTIALS")
        block["paramsOauth2ClientCredentials"] = {
            "clientId": auth.oauth2.client_id,
            "clientPassword": auth.oauth2.client_password.get_secret_value(),
            "tokenEndpoint": token_endpoint_url(settings),
        }
    if auth.mtls.enabled and auth.mtls.client_id:
        types.append("OAUTH2_CLIENT_CERT")
        block["paramsOauth2ClientCert"] = {
            "clientId": auth.mtls.client_id,
            "certificateRef": {"type": "x5t#S256", "value": auth.mtls.client_cert_sha256},
            "tokenEndpoint": token_endpoint_url(settings),
        }
    if not types:
        return None
    return {"authType": types, **block}


class CallbackAuth:
    """The token endpoint and the check on the callback path.

    Arguments:
        settings: the ``auth`` section.
        callback_path: the path whose GET and POST are protected.
        metrics: failures are counted here.
    """

    def __init__(
        self, settings: AuthSettings, callback_path: str, metrics: Metrics | None = None
    ) -> None:
        self._settings = settings
        self._path = callback_path
        self._metrics = metrics
        secret = settings.oauth2.client_password.get_secret_value()
        if not secret and settings.mtls.client_id:
            # OAUTH2_CLIENT_CERT alone: tokens only need to outlive this process.
            secret = secrets.token_hex(32)
        self._key = hashlib.sha256(b"lccn-subscriber token v1\0" + secret.encode()).digest()
        self._bearer = settings.oauth2.enabled or bool(
            settings.mtls.enabled and settings.mtls.client_id
        )

    @property
    def enabled(self) -> bool:
        """Whether callbacks need credentials at the HTTP level."""
        return self._settings.basic.enabled or self._bearer

    def install(self, app: web.Application) -> None:
        """Add the middleware and (when a bearer scheme is on) the token route to ``app``."""
        app.middlewares.append(self._middleware)
        if self._bearer:
            app.router.add_route("POST", self._settings.oauth2.token_path, self._token)

    # -- tokens --------------------------------------------------------------

    def issue_token(self, client_id: str, now: float | None = None) -> tuple[str, int]:
        """A signed bearer token for ``client_id`` and its lifetime in seconds."""
        ttl = int(self._settings.oauth2.token_ttl)
        now = time.time() if now is None else now
        claims = {"sub": client_id, "exp": int(now) + ttl, "jti": secrets.token_hex(8)}
        payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
        sig = _b64url(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())
        return f"{payload}.{sig}", ttl

    def _token_valid(self, token: str) -> bool:
        payload, _, sig = token.partition(".")
        if not payload or not sig:
            return False
        expected = _b64url(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())
        if not _same(sig, expected):
            return False
        try:
            claims = json.loads(_b64url_decode(payload))
        except (ValueError, binascii.Error):
            return False
        allowed = {self._settings.oauth2.client_id, self._settings.mtls.client_id} - {""}
        return (
            isinstance(claims, dict)
            and claims.get("sub") in allowed
            and isinstance(claims.get("exp"), int)
            and claims["exp"] > time.time()
        )

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("grant_type") != "client_credentials":
            return web.json_response(
                {"error": "unsupported_grant_type"},
                status=400,
                headers={"Cache-Control": "no-store"},
            )
        client = self._client_from_basic(request) or self._client_from_cert(request, form)
        if client is None:
            self._failed("token", request)
            return web.json_response(
                {"error": "invalid_client"},
                status=401,
                headers={
                    "WWW-Authenticate": f'Basic realm="{self._settings.realm}"',
                    "Cache-Control": "no-store",
                },
            )
        token, ttl = self.issue_token(client)
        return web.json_response(
            {"access_token": token, "token_type": "Bearer", "expires_in": ttl},
            headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
        )

    def _client_from_basic(self, request: web.Request) -> str | None:
        oauth2 = self._settings.oauth2
        if not oauth2.enabled:
            return None
        creds = _basic_credentials(request)
        if creds is None:
            return None
        user, password = creds
        ok_user = _same(user, oauth2.client_id)
        ok_pass = _same(password, oauth2.client_password.get_secret_value())
        return oauth2.client_id if ok_user and ok_pass else None

    def _client_from_cert(self, request: web.Request, form: Any) -> str | None:
        mtls = self._settings.mtls
        if not (mtls.enabled and mtls.client_id):
            return None
        client_id = form.get("client_id")
        if not isinstance(client_id, str) or not _same(client_id, mtls.client_id):
            return None
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return None
        if mtls.client_cert_sha256 and not _same(cert_thumbprint(der), mtls.client_cert_sha256):
            return None
        return mtls.client_id

    # -- the callback check -----------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path != self._path or not self.enabled:
            return await handler(request)
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        scheme = scheme.lower()
        if scheme == "basic" and self._settings.basic.enabled:
            creds = _basic_credentials(request)
            if creds is not None:
                user, password = creds
                ok_user = _same(user, self._settings.basic.username)
                ok_pass = _same(password, self._settings.basic.password.get_secret_value())
                if ok_user and ok_pass:
                    return await handler(request)
        elif scheme == "bearer" and self._bearer and self._token_valid(value.strip()):
            return await handler(request)
        self._failed("callback", request)
        # Don't read the body: nothing of a rejected request is stored.
        return problem_response(
            401,
            "valid credentials are required for this callback",
            instance=request.path,
            headers={
                "WWW-Authenticate": self._challenge(scheme == "bearer"),
                "Connection": "close",
            },
        )

    def _challenge(self, bad_token: bool) -> str:
        realm = self._settings.realm
        parts = []
        if self._bearer:
            error = ', error="invalid_token"' if bad_token else ""
            parts.append(f'Bearer realm="{realm}"{error}')
        if self._settings.basic.enabled:
            parts.append(f'Basic realm="{realm}", charset="UTF-8"')
        return ", ".join(parts)

    def _failed(self, endpoint: str, request: web.Request) -> None:
        if self._metrics is not None:
            self._metrics.auth_failures.labels(endpoint).inc()
        scheme = request.headers.get("Authorization", "").partition(" ")[0] or "none"
        log.warning(
            "authentication failed",
            extra={"endpoint": endpoint, "scheme": scheme.lower(), "peer": request.remote},
        )


def _basic_credentials(request: web.Request) -> tuple[str, str] | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (ValueError, binascii.Error):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None
