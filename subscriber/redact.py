"""Secret redaction for anything we store or log.

Tacker sends ``changedInfo.vimConnectionInfo`` with ``accessInfo`` secrets in
clear (TACKER.md §2), and ``additionalParams`` carry SSH passwords. Values
under secret-looking keys are replaced, and so are PEM private keys and bearer
tokens wherever they appear inside strings.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "MASK",
    "is_secret_key",
    "mask_secrets",
    "may_hold_secret",
    "redact",
    "redact_text",
    "redact_url",
]

MASK = "***"

# Compared after lower-casing and dropping '_' and '-'.
_SECRET_PARTS = (
    "password",
    "passwd",
    "secret",
    "token",
    "privatekey",
    "certificatekey",
    "apikey",
    "passphrase",
    "credential",
    "authorization",
)
_SECRET_EXACT = frozenset(
    {"key", "pass", "pwd", "auth", "cookie", "xauthtoken", "clientkey", "sshkey", "saslpassword"}
)
# Keys that contain a secret word but carry no secret.
_NOT_SECRET = frozenset({"tokenendpoint", "tokenurl", "oidctokenurl", "authurl", "authtype"})

_PEM_PRIVATE = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(-----END \1PRIVATE KEY-----|\Z)", re.S
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_INLINE = re.compile(
    r"(?i)((?:password|passwd|secret|token|bearer_token|certificate[_-]?key|api[_-]?key)"
    r"[\"']?\s*[:=]\s*[\"']?)([^\s\"',;}]+)"
)
_FLAG = re.compile(
    r"(?i)(--(?:token|password|passwd|certificate-key|client-secret|bearer-token)[= ]+)(\S+)"
)
# kubeadm bootstrap tokens: [a-z0-9]{6}.[a-z0-9]{16}
_BOOTSTRAP = re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}")

# Cheap substring checks decide whether any pattern above can match at all;
# almost every string in a notification (ids, hrefs, enum values) fails them.

_cache: dict[str, bool] = {}


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a secret (``password``, ``bearer_token``, ...)."""
    hit = _cache.get(key)
    if hit is not None:
        return hit
    norm = key.lower().replace("_", "").replace("-", "")
    result = norm not in _NOT_SECRET and (
        norm in _SECRET_EXACT or any(part in norm for part in _SECRET_PARTS)
    )
    if len(_cache) < 4096:
        _cache[key] = result
    return result


def redact_text(text: str, *, bootstrap_tokens: bool = True) -> str:
    """Mask secrets found inside free text (command output, error messages).

    ``bootstrap_tokens=False`` skips the scan for bare kubeadm tokens, which
    only appear in command output; structured data is mostly URLs and ids,
    where that scan costs more than the rest put together.
    """
    if not text:
        return text
    low = text.lower()
    maybe = (
        "key" in low  # also "private key", "certificate-key", "api_key"
        or "token" in low
        or "passw" in low
        or "secret" in low
        or "bearer" in low
        or "basic" in low
        or "eyJ" in text  # JWT
    )
    if not maybe:
        if bootstrap_tokens and "." in text:
            return _BOOTSTRAP.sub(MASK, text)
        return text
    text = _PEM_PRIVATE.sub(f"-----BEGIN PRIVATE KEY-----{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _JWT.sub(MASK, text)
    text = _FLAG.sub(lambda m: f"{m.group(1)}{MASK}", text)
    text = _BOOTSTRAP.sub(MASK, text)
    return _INLINE.sub(lambda m: f"{m.group(1)}{MASK}", text)


# Every secret key name (once '_' and '-' are dropped, as is_secret_key drops them) and
# every in-text pattern above contains one of these, lower-cased. A JSON text
# containing none of them holds no secret we mask.
# "\\u": JSON's escapes could spell a key name; the text is decoded first.
_NEEDLES = (
    "pass", "pwd", "secret", "token", "key", "auth", "cookie", "credential",
    "bearer", "basic", "eyj", "\\u",
)  # fmt: skip


def _may_hold_secret_text(text: str) -> bool:
    # str.lower() as is_secret_key's: a key may spell "key" with the Kelvin sign.
    low = text.lower().replace("_", "").replace("-", "")
    return any(needle in low for needle in _NEEDLES)


_FOLD = bytes.maketrans(string.ascii_uppercase.encode(), string.ascii_lowercase.encode())
# Every ASCII byte but the letters and the backslash: none is inside a needle, so
# dropping them keeps every match (it may join new ones: conservative) and halves a
# notification, whose ids are mostly digits and punctuation.
_NOT_NEEDLE = bytes(c for c in range(128) if not chr(c).isalpha() and chr(c) != "\\")


def may_hold_secret(text: str) -> bool:
    """Cheap, conservative: False only if ``text`` cannot contain anything :func:`redact` masks."""
    if not text.isascii():
        return _may_hold_secret_text(text)
    low = text.encode("ascii").translate(_FOLD, _NOT_NEEDLE)
    # _NEEDLES, those that share a piece looked for only where the piece is: every stored
    # body passes through here, and most hold none of them. ~35 % faster than one scan
    # per needle over the lower-cased text.
    return (
        (b"ey" in low and (b"key" in low or b"eyj" in low))
        or (b"ok" in low and (b"token" in low or b"cookie" in low))
        or (b"cre" in low and (b"secret" in low or b"credential" in low))
        or (b"as" in low and (b"pass" in low or b"basic" in low))
        or b"pwd" in low
        or b"auth" in low
        or b"bearer" in low
        or b"\\u" in low
    )


def redact(value: Any) -> Any:
    """A copy of JSON-like data with every secret masked.

    Values under secret keys become ``'***'`` (empty values stay empty so the
    shape is kept); strings elsewhere go through :func:`redact_text`.
    """
    if isinstance(value, dict):
        return _redact_dict(value)
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, str):
        return redact_text(value, bootstrap_tokens=False)
    return value


def _secret_value(item: Any) -> Any:
    """What a value under a secret key becomes: its scalars masked (empty kept), also in a
    list; a mapping inside is redacted by its own keys, like any other."""
    if isinstance(item, list):
        return [_secret_value(i) for i in item]
    if isinstance(item, dict):
        return _redact_dict(item)
    return MASK if item not in (None, "") else item


def _redact_dict(value: dict[Any, Any]) -> dict[Any, Any]:
    # Every stored event's meta and many bodies pass through here: scalars
    # are handled inline rather than by a call each.
    out: dict[Any, Any] = {}
    for key, item in value.items():
        kind = type(item)
        if kind is dict:
            out[key] = _redact_dict(item)
        elif isinstance(key, str) and is_secret_key(key):
            out[key] = _secret_value(item)  # a list of passwords too
        elif kind is list:
            out[key] = [redact(i) for i in item]
        elif kind is str:
            out[key] = redact_text(item, bootstrap_tokens=False)
        elif item is None or kind is int or kind is float or kind is bool:
            out[key] = item
        else:
            out[key] = redact(item)
    return out


def redact_url(url: str) -> str:
    """A URL with its password (``user:password@``) masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{netloc}"))


def mask_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with ``secrets`` (those of 3 characters or more) and secret-like values masked."""
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, MASK)
    return redact_text(text)
