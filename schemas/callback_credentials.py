"""The record of one LCCN subscription's callback credential, as far as we keep it.

What crosses the store's boundary: the store keeps it (``kv`` under
``callback_auth/<id>``), the subscription keeper writes it, the callback's auth
checks what Tacker presents against it. Never the secret itself: a verifier.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal

__all__ = ["CredentialKind", "StoredCredential"]

CredentialKind = Literal["BASIC", "OAUTH2_CLIENT_CREDENTIALS", "SETTINGS"]


@dataclass(frozen=True, slots=True)
class StoredCredential:
    """One subscription's callback credential, as far as we keep it.

    Attributes:
        id: ours (the ``kv`` key's tail).
        kind: ``BASIC`` / ``OAUTH2_CLIENT_CREDENTIALS`` (generated: ``principal`` and
            ``verifier`` check what Tacker presents), or ``SETTINGS`` (the settings'
            credentials were sent; ``verifier`` fingerprints that block).
        principal: the user name (BASIC) or client id (OAuth2); empty for SETTINGS.
        verifier: ``sha256:<hex>``, ``ed25519:<base64url>`` or ``scrypt:<salt>:<hash>``.
        callback_uri: the subscription's callbackUri.
        api: the VNF LCM API it was made with (``v1`` / ``v2``).
        subscription_id: Tacker's id; ``None`` until Tacker answered the request.
        created_at: epoch seconds.
    """

    id: str
    kind: CredentialKind
    principal: str
    verifier: str
    callback_uri: str
    api: str
    subscription_id: str | None = None
    created_at: float = 0.0

    @property
    def generated(self) -> bool:
        return self.kind != "SETTINGS"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StoredCredential:
        data = json.loads(text)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
