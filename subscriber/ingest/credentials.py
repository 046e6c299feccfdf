"""Generated callback credentials: make them, check them, sign and check their tokens.

No I/O here. A generated secret is 256 random bits (``secrets.token_urlsafe``),
so an unsalted SHA-256 digest is a safe verifier for BASIC. For
OAUTH2_CLIENT_CREDENTIALS the secret seeds an Ed25519 key: the token endpoint,
given the secret by Tacker, derives the private key and signs the token; the
callback check needs only the public key, which is the stored verifier. Any
replica reading the store accepts the tokens, and nothing in the store mints
them.

The settings' own credentials are not stored at all; only an scrypt
fingerprint of the authentication block we sent (salted: a configured
password may be a weak one) tells a later start whether an existing
subscription still carries them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from typing import TYPE_CHECKING, Any, Literal

from schemas.callback_credentials import StoredCredential

if TYPE_CHECKING:
    # Imported where used (about 7 MB resident): a serve without OAuth2 clients never loads it.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "GeneratedKind",
    "fingerprint_matches",
    "new_credential",
    "public_key",
    "secret_matches",
    "settings_fingerprint",
    "sign_token",
    "signing_key",
    "token_claims",
    "verify_token",
]

GeneratedKind = Literal["BASIC", "OAUTH2_CLIENT_CREDENTIALS"]

_BASIC_CONTEXT = b"lccn-subscriber basic v1\0"
_TOKEN_KEY_CONTEXT = b"lccn-subscriber oauth2 token key v1"
# scrypt: about 16 MiB and a few tens of ms, once per subscription check.
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def signing_key(secret: str) -> Ed25519PrivateKey:
    """The Ed25519 key an OAuth2 client secret stands for (derived, never stored)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    seed = hmac.new(secret.encode("utf-8"), _TOKEN_KEY_CONTEXT, hashlib.sha256).digest()
    return Ed25519PrivateKey.from_private_bytes(seed)


def _verifier(kind: GeneratedKind, secret: str) -> str:
    if kind == "BASIC":
        digest = hashlib.sha256(_BASIC_CONTEXT + secret.encode("utf-8")).hexdigest()
        return f"sha256:{digest}"
    return "ed25519:" + _b64url(signing_key(secret).public_key().public_bytes_raw())


def new_credential(
    kind: GeneratedKind, callback_uri: str, api: str
) -> tuple[StoredCredential, str]:
    """Fresh credentials for one subscription.

    Returns:
        the record to store (no secret in it) and the secret, which goes to
        Tacker in the subscription request and nowhere else.
    """
    cid = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    record = StoredCredential(
        id=cid,
        kind=kind,
        principal=f"lccn-{cid}",
        verifier=_verifier(kind, secret),
        callback_uri=callback_uri,
        api=api,
        created_at=time.time(),
    )
    return record, secret


def secret_matches(credential: StoredCredential, secret: str) -> bool:
    """Whether ``secret`` is the one a generated record was made for (constant time)."""
    if credential.kind == "SETTINGS":
        return False
    expected = _verifier(credential.kind, secret)
    return hmac.compare_digest(expected.encode(), credential.verifier.encode())


def public_key(credential: StoredCredential) -> Ed25519PublicKey | None:
    """The token-checking key of a generated OAuth2 record (``None`` for other kinds)."""
    scheme, _, value = credential.verifier.partition(":")
    if credential.kind != "OAUTH2_CLIENT_CREDENTIALS" or scheme != "ed25519":
        return None
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        return Ed25519PublicKey.from_public_bytes(_b64url_decode(value))
    except (ValueError, binascii.Error):
        return None


def sign_token(key: Ed25519PrivateKey, client_id: str, ttl: int, now: float) -> str:
    """A bearer token for ``client_id``, valid ``ttl`` seconds from ``now``."""
    claims = {"sub": client_id, "exp": int(now) + ttl, "jti": secrets.token_hex(8)}
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    return f"{payload}.{_b64url(key.sign(payload.encode()))}"


def token_claims(token: str) -> dict[str, Any] | None:
    """The (unchecked) claims of a ``payload.signature`` token, or ``None`` if malformed."""
    payload, _, sig = token.partition(".")
    if not payload or not sig or len(token) > 4096:
        return None
    try:
        claims = json.loads(_b64url_decode(payload))
    except (ValueError, binascii.Error):
        return None
    return claims if isinstance(claims, dict) else None


def verify_token(key: Ed25519PublicKey, token: str, now: float) -> bool:
    """Whether ``token`` was signed by ``key``'s owner and has not expired."""
    from cryptography.exceptions import InvalidSignature

    payload, _, sig = token.partition(".")
    try:
        key.verify(_b64url_decode(sig), payload.encode())
    except (InvalidSignature, ValueError, binascii.Error):
        return False
    claims = token_claims(token)
    return claims is not None and isinstance(claims.get("exp"), int) and claims["exp"] > now


def _canonical(block: dict[str, Any]) -> bytes:
    return json.dumps(block, sort_keys=True, separators=(",", ":")).encode()


def settings_fingerprint(block: dict[str, Any]) -> str:
    """A salted scrypt fingerprint of an ``authentication`` block (it holds secrets)."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(_canonical(block), salt=salt, **_SCRYPT)
    return f"scrypt:{_b64url(salt)}:{_b64url(digest)}"


def fingerprint_matches(fingerprint: str, block: dict[str, Any]) -> bool:
    """Whether ``block`` is the one :func:`settings_fingerprint` was made from."""
    scheme, _, rest = fingerprint.partition(":")
    salt_text, _, digest_text = rest.partition(":")
    if scheme != "scrypt" or not salt_text or not digest_text:
        return False
    try:
        salt, digest = _b64url_decode(salt_text), _b64url_decode(digest_text)
    except (ValueError, binascii.Error):
        return False
    again = hashlib.scrypt(_canonical(block), salt=salt, **_SCRYPT)
    return hmac.compare_digest(again, digest)
