"""The callback credentials we generated for our own subscriptions: what checks them.

When ``serve`` (or ``lccn-subscriber subscribe``) creates our LCCN
subscription and the settings name no credentials, it generates them. The
secret goes to Tacker once, inside the subscription request; the store keeps
only a *verifier* that checks it (a SHA-256 digest for BASIC, an Ed25519
public key for OAUTH2_CLIENT_CREDENTIALS), so a copy of the database gives
no one the password, nor a way to mint bearer tokens.

A record is also kept for a subscription made with the settings' own
credentials: an scrypt fingerprint of the authentication block sent, so that
a later start can tell whether the subscription Tacker holds still carries
the credentials configured now.

Records live in the ``kv`` table under ``callback_auth/<id>`` (one JSON value
each): few rows, read whole.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from subscriber.store.database import Database
from subscriber.store.tables import kv
from subscriber.store.writer import INGEST, WriteQueue

__all__ = ["CredentialKind", "CredentialStore", "StoredCredential"]

_PREFIX = "callback_auth/"

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


class CredentialStore:
    """Reads and writes of the credential records (implements the subscription keeper's
    :class:`~subscriber.tacker.ports.CredentialLedger` and the callback check's source)."""

    def __init__(self, db: Database, *, writer: WriteQueue) -> None:
        self._db = db
        self._writer = writer

    async def all(self) -> list[StoredCredential]:
        """Every record, oldest first."""
        q = sa.select(kv.c.value).where(kv.c.key.startswith(_PREFIX, autoescape=True))
        rows = await self._db.read(lambda conn: conn.execute(q).all())
        found = [StoredCredential.from_json(str(r[0])) for r in rows]
        return sorted(found, key=lambda c: (c.created_at, c.id))

    async def add(self, credential: StoredCredential) -> None:
        """Store a record, durably (committed when this returns: Tacker's test GET may
        follow at once, and may reach another process that reads the store)."""
        value = credential.to_json()
        now = time.time()

        def write(conn: Connection) -> None:
            conn.execute(
                sa.insert(kv).values(key=_PREFIX + credential.id, value=value, updated_at=now)
            )

        await self._writer.run(write, priority=INGEST)

    async def bind(self, credential_id: str, subscription_id: str) -> StoredCredential | None:
        """Attach Tacker's subscription id to a record; returns it (``None``: gone)."""
        key = _PREFIX + credential_id

        def write(conn: Connection) -> StoredCredential | None:
            text = conn.scalar(sa.select(kv.c.value).where(kv.c.key == key))
            if text is None:
                return None
            bound = replace(StoredCredential.from_json(str(text)), subscription_id=subscription_id)
            conn.execute(
                sa.update(kv)
                .where(kv.c.key == key)
                .values(value=bound.to_json(), updated_at=time.time())
            )
            return bound

        return await self._writer.run(write, priority=INGEST)

    async def forget(self, credential_ids: list[str]) -> None:
        """Delete records: their credentials are refused from the next refresh on."""
        if not credential_ids:
            return
        keys = [_PREFIX + i for i in credential_ids]

        def write(conn: Connection) -> None:
            conn.execute(sa.delete(kv).where(kv.c.key.in_(keys)))

        await self._writer.run(write)
