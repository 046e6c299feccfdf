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

import time
from dataclasses import replace

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from schemas.callback_credentials import StoredCredential
from subscriber.store.database import Database
from subscriber.store.tables import kv
from subscriber.store.writer import INGEST, WriteQueue

__all__ = ["CredentialStore", "StoredCredential"]

_PREFIX = "callback_auth/"


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
