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

Besides the settings' credentials, those generated for our own subscription
(see :mod:`subscriber.ingest.credentials`) are accepted: the store holds their
verifiers, read at start, every ``refresh_interval`` and, at most every
``min_reload_interval``, when a request presents credentials we do not know
(Tacker's test GET of a subscription another process is creating right now:
it is then accepted, and with callback auth off until then, auth is on from
the next request).
Callback auth is *on* when the settings name credentials, when some were
generated, or when this process will generate them (``required``: it
subscribes itself); otherwise it is off, which ``serve`` logs at start and
``/readyz`` reports (the service stays ready).

A rejected callback gets 401 ProblemDetails with ``WWW-Authenticate`` and is
not stored; the failure is counted (``lccn_auth_failures``). Credentials are
never logged. The test notification (GET) is checked the same way: Tacker
sends the same authentication on it. Probe paths given as ``protect`` (the
callback listener's ``/metrics`` and ``/readyz`` when they have a listener of
their own) need the same credentials, and are refused outright while callback
auth is off.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
import ssl
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

from schemas.callback_credentials import StoredCredential
from subscriber.config import AuthSettings, Settings
from subscriber.errors import ConfigError, StoreError
from subscriber.health import CheckResult
from subscriber.ingest import credentials as gen
from subscriber.ingest.http import add_guard
from subscriber.ingest.problems import problem_response
from subscriber.lifecycle import Component, State
from subscriber.metrics import AuthCounters
from subscriber.store import CredentialStore

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = [
    "AUTH_OFF",
    "CallbackAuth",
    "build_ssl_context",
    "cert_thumbprint",
    "generated_authentication",
    "subscription_authentication",
    "token_endpoint_url",
]

AUTH_OFF = "callback auth off"

log = logging.getLogger(__name__)


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


def token_endpoint_url(settings: Settings, callback_uri: str = "") -> str:
    """Where Tacker should ask for tokens: ``auth.oauth2.token_endpoint``, else the origin
    of ``callback_uri`` (what Tacker already reaches) plus ``token_path``, else this
    listener's address."""
    oauth2 = settings.auth.oauth2
    if oauth2.token_endpoint:
        return oauth2.token_endpoint
    if callback_uri:
        parts = urlsplit(callback_uri)
        return f"{parts.scheme}://{parts.netloc}{oauth2.token_path}"
    scheme = "https" if settings.auth.mtls.enabled else "http"
    return f"{scheme}://{settings.http.host}:{settings.http.port}{oauth2.token_path}"


def subscription_authentication(
    settings: Settings, callback_uri: str = ""
) -> dict[str, Any] | None:
    """The SOL003 ``authentication`` block of a subscription request matching the settings'
    own credentials (generated ones are not in the settings: see
    :func:`generated_authentication`).

    Returns ``None`` when the settings name no callback credentials. Tacker picks
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
            "tokenEndpoint": token_endpoint_url(settings, callback_uri),
        }
    if auth.mtls.enabled and auth.mtls.client_id:
        types.append("OAUTH2_CLIENT_CERT")
        block["paramsOauth2ClientCert"] = {
            "clientId": auth.mtls.client_id,
            "certificateRef": {"type": "x5t#S256", "value": auth.mtls.client_cert_sha256},
            "tokenEndpoint": token_endpoint_url(settings, callback_uri),
        }
    if not types:
        return None
    return {"authType": types, **block}


def generated_authentication(
    settings: Settings, credential: StoredCredential, secret: str
) -> dict[str, Any]:
    """The ``authentication`` block that hands a generated credential to Tacker."""
    if credential.kind == "BASIC":
        return {
            "authType": ["BASIC"],
            "paramsBasic": {"userName": credential.principal, "password": secret},
        }
    return {
        "authType": ["OAUTH2_CLIENT_CREDENTIALS"],
        "paramsOauth2ClientCredentials": {
            "clientId": credential.principal,
            "clientPassword": secret,
            "tokenEndpoint": token_endpoint_url(settings, credential.callback_uri),
        },
    }


class CallbackAuth(Component):
    """The token endpoint and the check on the callback path (and on ``protect``).

    Arguments:
        settings: the ``auth`` section.
        callback_path: the path whose GET and POST are protected.
        metrics: failures are counted here.
        credentials: where generated credentials are kept (``None``: settings only).
        required: callbacks need credentials even before any exists (this process
            creates our subscription with generated ones).
        protect: further paths that need the callback's credentials (the probes on a
            listener that is not private); while callback auth is off they are refused.
        refresh_interval: seconds between reads of the stored credentials.
        min_reload_interval: at least this many seconds between two reads that unknown
            credentials cause.
    """

    def __init__(
        self,
        settings: AuthSettings,
        callback_path: str,
        metrics: AuthCounters | None = None,
        *,
        credentials: CredentialStore | None = None,
        required: bool = False,
        protect: Iterable[str] = (),
        refresh_interval: float = 10.0,
        min_reload_interval: float = 0.2,
    ) -> None:
        super().__init__()
        self._settings = settings
        self._path = callback_path
        self._protect = frozenset(protect)
        self._metrics = metrics
        self._store = credentials
        self._required = required
        self._refresh_interval = refresh_interval
        self._min_reload = min_reload_interval
        secret = settings.oauth2.client_password.get_secret_value()
        if not secret and settings.mtls.client_id:
            # OAUTH2_CLIENT_CERT alone: tokens only need to outlive this process.
            secret = secrets.token_hex(32)
        self._key = hashlib.sha256(b"lccn-subscriber token v1\0" + secret.encode()).digest()
        self._bearer = settings.oauth2.enabled or bool(
            settings.mtls.enabled and settings.mtls.client_id
        )
        # Generated credentials by principal, and the token keys of the OAuth2 ones.
        self._generated: dict[str, StoredCredential] = {}
        self._token_keys: dict[str, Ed25519PublicKey] = {}
        self._reload_lock = asyncio.Lock()
        self._reloaded_from = float("-inf")  # monotonic start of the last completed read
        self._was_off: bool | None = None

    @property
    def enabled(self) -> bool:
        """Whether callbacks need credentials at the HTTP level."""
        return (
            self._settings.basic.enabled or self._bearer or self._required or bool(self._generated)
        )

    @property
    def off(self) -> bool:
        """Whether anyone may post notifications (no credentials, no client certificates)."""
        return not (self.enabled or self._settings.mtls.enabled)

    def install(self, app: web.Application) -> None:
        """Guard ``app`` (one made by :func:`~subscriber.ingest.http.make_app`) and add the
        token route (it answers ``invalid_client`` while no OAuth2 client exists)."""
        add_guard(app, self.refuse)
        app.router.add_route("POST", self._settings.oauth2.token_path, self._token)

    # -- lifecycle and the stored credentials -------------------------------------

    async def _start(self) -> None:
        if self._store is not None:
            await self.reload()
            self._spawn("callback-credentials", self._refresh_loop, restart=True)

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_interval)
            await self.reload()
            if self._was_off is not None:
                self.announce()

    def announce(self) -> None:
        """Log the state (the service calls it once its listener is up), then, from the
        refresh, each time it changes (off <-> on)."""
        off = self.off
        if off == self._was_off:
            return
        if off:
            log.warning(
                "%s: anyone who reaches the callback can post notifications; set auth.basic, "
                "auth.oauth2 or auth.mtls, or let serve subscribe (tacker.subscribe_on_start, "
                "credentials generated)",
                AUTH_OFF,
            )
        elif self._was_off is not None:
            log.info("callback auth on", extra={"accepted": self.describe()})
        self._was_off = off

    async def reload(self) -> None:
        """Read the generated credentials again (a store error keeps the last ones)."""
        if self._store is None:
            return
        began = time.monotonic()
        try:
            records = await self._store.all()
        except StoreError as exc:
            log.warning("cannot read the callback credentials", extra={"error": exc.message})
            return
        generated = {c.principal: c for c in records if c.generated}
        keys = {}
        for principal, record in generated.items():
            key = gen.public_key(record)
            if key is not None:
                keys[principal] = key
        self._generated, self._token_keys = generated, keys
        self._reloaded_from = max(self._reloaded_from, began)

    async def _reload_after(self, arrived: float) -> None:
        """Make sure a read that began after ``arrived`` has completed (reads spaced
        ``min_reload_interval`` apart, one at a time: a flood of bad credentials costs
        the store a few reads a second)."""
        if self._store is None:
            return
        async with self._reload_lock:
            if self._reloaded_from >= arrived:
                return
            wait = self._reloaded_from + self._min_reload - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await self.reload()

    def _look_again(self, arrived: float) -> None:
        """Credentials came while none is known: another process may be subscribing with
        generated ones right now (``lccn-subscriber subscribe``; this is Tacker's test GET).
        Read the store in the background, so callback auth is on from the next request."""
        if self._store is None or self.state is not State.RUNNING:
            return
        if self._task("callback-credentials-look") is not None:
            return

        async def look() -> None:
            await self._reload_after(arrived)
            self.announce()

        self._spawn("callback-credentials-look", look, restart=False)

    async def readiness(self) -> CheckResult:
        """Always ready; the detail says whether (and how) callbacks are authenticated."""
        return CheckResult(True, self.describe())

    def describe(self) -> str:
        """``callback auth off``, or which credentials are accepted (no secret)."""
        if self.off:
            return AUTH_OFF
        accepted: list[str] = []
        if self._settings.basic.enabled:
            accepted.append("BASIC")
        if self._settings.oauth2.enabled:
            accepted.append("OAUTH2_CLIENT_CREDENTIALS")
        if self._settings.mtls.enabled:
            accepted.append("OAUTH2_CLIENT_CERT" if self._settings.mtls.client_id else "mTLS")
        kinds = sorted({c.kind for c in self._generated.values()})
        accepted += [f"{kind} (generated)" for kind in kinds]
        if not accepted:
            accepted.append("our subscription's generated credentials (none yet)")
        return "callback auth on: " + ", ".join(accepted)

    # -- tokens --------------------------------------------------------------

    def issue_token(self, client_id: str, now: float | None = None) -> tuple[str, int]:
        """A signed bearer token for a settings client (``client_id``) and its lifetime."""
        ttl = int(self._settings.oauth2.token_ttl)
        now = time.time() if now is None else now
        claims = {"sub": client_id, "exp": int(now) + ttl, "jti": secrets.token_hex(8)}
        payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
        sig = _b64url(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())
        return f"{payload}.{sig}", ttl

    def _token_valid(self, token: str) -> bool:
        claims = gen.token_claims(token)
        if claims is None:
            return False
        sub = claims.get("sub")
        if isinstance(sub, str) and sub in self._token_keys:
            return gen.verify_token(self._token_keys[sub], token, time.time())
        if not self._bearer:
            return False
        payload, _, sig = token.partition(".")
        expected = _b64url(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())
        if not _same(sig, expected):
            return False
        allowed = {self._settings.oauth2.client_id, self._settings.mtls.client_id} - {""}
        return sub in allowed and isinstance(claims.get("exp"), int) and claims["exp"] > time.time()

    async def _token(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        form = await request.post()
        if form.get("grant_type") != "client_credentials":
            return web.json_response(
                {"error": "unsupported_grant_type"},
                status=400,
                headers={"Cache-Control": "no-store"},
            )
        issued = self._issue_for_basic(request) or self._issue_for_cert(request, form)
        if issued is None and _basic_credentials(request) is not None:
            await self._reload_after(arrived)  # a client generated a moment ago
            issued = self._issue_for_basic(request)
        if issued is None:
            self._failed("token", request)
            return web.json_response(
                {"error": "invalid_client"},
                status=401,
                headers={
                    "WWW-Authenticate": f'Basic realm="{self._settings.realm}"',
                    "Cache-Control": "no-store",
                },
            )
        token, ttl = issued
        return web.json_response(
            {"access_token": token, "token_type": "Bearer", "expires_in": ttl},
            headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
        )

    def _issue_for_basic(self, request: web.Request) -> tuple[str, int] | None:
        creds = _basic_credentials(request)
        if creds is None:
            return None
        user, password = creds
        record = self._generated.get(user)
        if record is not None and record.kind == "OAUTH2_CLIENT_CREDENTIALS":
            if not gen.secret_matches(record, password):
                return None
            ttl = int(self._settings.oauth2.token_ttl)
            return gen.sign_token(gen.signing_key(password), user, ttl, time.time()), ttl
        oauth2 = self._settings.oauth2
        if not oauth2.enabled:
            return None
        ok_user = _same(user, oauth2.client_id)
        ok_pass = _same(password, oauth2.client_password.get_secret_value())
        return self.issue_token(oauth2.client_id) if ok_user and ok_pass else None

    def _issue_for_cert(self, request: web.Request, form: Any) -> tuple[str, int] | None:
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
        return self.issue_token(mtls.client_id)

    # -- the callback check -----------------------------------------------------

    def _accepts(self, header: str) -> bool:
        scheme, _, value = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "basic":
            creds = _decode_basic(value)
            if creds is None:
                return False
            user, password = creds
            record = self._generated.get(user)
            if record is not None and record.kind == "BASIC":
                return gen.secret_matches(record, password)
            basic = self._settings.basic
            if not basic.enabled:
                return False
            ok_user = _same(user, basic.username)
            ok_pass = _same(password, basic.password.get_secret_value())
            return ok_user and ok_pass
        if scheme == "bearer":
            return self._token_valid(value.strip())
        return False

    async def refuse(self, request: web.Request) -> web.StreamResponse | None:
        """The answer that refuses ``request`` (401, or 404 for a protected probe while
        callback auth is off), or ``None`` when it may pass."""
        path = request.path
        callback = path == self._path
        if not callback and path not in self._protect:
            return None
        if not self.enabled:
            if callback and "Authorization" in request.headers:
                self._look_again(time.monotonic())
            if callback or self._settings.mtls.enabled:  # off, or the TLS handshake checked
                return None
            return problem_response(
                404,
                f"{path} is served on the metrics listener (http.metrics_host) only",
                instance=path,
            )
        arrived = time.monotonic()
        header = request.headers.get("Authorization", "")
        if self._accepts(header):
            return None
        if header and self._store is not None:
            await self._reload_after(arrived)  # credentials generated a moment ago?
            if self._accepts(header):
                return None
        scheme = header.partition(" ")[0].lower()
        self._failed("callback" if callback else "probe", request)
        # Don't read the body: nothing of a rejected request is stored.
        what = "this callback" if callback else path
        return problem_response(
            401,
            f"valid credentials are required for {what}",
            instance=path,
            headers={
                "WWW-Authenticate": self._challenge(scheme == "bearer"),
                "Connection": "close",
            },
        )

    def _challenge(self, bad_token: bool) -> str:
        realm = self._settings.realm
        kinds = {c.kind for c in self._generated.values()}
        parts = []
        if self._bearer or "OAUTH2_CLIENT_CREDENTIALS" in kinds:
            error = ', error="invalid_token"' if bad_token else ""
            parts.append(f'Bearer realm="{realm}"{error}')
        if self._settings.basic.enabled or "BASIC" in kinds or not parts:
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


def _decode_basic(value: str) -> tuple[str, str] | None:
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (ValueError, binascii.Error):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


def _basic_credentials(request: web.Request) -> tuple[str, str] | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    return _decode_basic(value)
