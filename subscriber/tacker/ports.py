"""What talking back to Tacker needs from outside the package: where our write-backs are noted.

Two small protocols, so that neither the client nor the echo filter depends on
the store. The service hands both the store's ``tacker`` part
(:class:`~subscriber.store.TackerStateStore`), which implements them; tests may
hand in-memory ones.

* :class:`EchoRecorder`, given to :class:`~subscriber.tacker.TackerClient`:
  before each write-back PATCH it notes, durably, that an echo is expected,
  then attaches the MODIFY_INFO op-occ id from the 202, or drops the note when
  Tacker refused the PATCH.
* :class:`EchoLedger`, given to :class:`~subscriber.tacker.EchoFilter`: which
  op-occs are ours, which notes never got their op-occ id, and recording an
  op-occ found to be ours.
* :class:`CredentialLedger`, given to the subscription keeper (the store's
  ``credentials`` part): the records of the callback credentials our
  subscriptions were made with.
"""

from __future__ import annotations

from typing import Protocol

from schemas.callback_credentials import StoredCredential

__all__ = ["CredentialLedger", "EchoLedger", "EchoRecorder"]


class EchoRecorder(Protocol):
    """Where the client records the write-backs it makes."""

    async def expect_echo(self, vnf_instance_id: str) -> int:
        """Note, durably (committed when this returns), that a PATCH of the instance is next.

        Returns:
            the note's id, for :meth:`confirm_echo` or :meth:`drop_echo`.
        """
        ...

    async def confirm_echo(self, intent_id: int, op_occ_id: str) -> None:
        """Attach the MODIFY_INFO op-occ id (from the PATCH's 202 ``Location``) to a note."""
        ...

    async def drop_echo(self, intent_id: int) -> None:
        """Forget a note whose PATCH Tacker refused (no op-occ, so no echo will come)."""
        ...


class EchoLedger(Protocol):
    """What the echo filter reads (and adds to) to recognise our own MODIFY_INFO op-occs."""

    async def is_own(self, op_occ_id: str) -> bool:
        """Whether the op-occ is one of our write-backs."""
        ...

    async def open_intents(self, vnf_instance_id: str, since: float) -> int:
        """How many PATCHes of the instance, noted after ``since``, never got their op-occ id."""
        ...

    async def record_own(self, vnf_instance_id: str, op_occ_id: str) -> None:
        """Record an op-occ as ours (found by checking an open note with Tacker)."""
        ...


class CredentialLedger(Protocol):
    """Where the credentials of our subscriptions are recorded (verifiers, never secrets)."""

    async def all(self) -> list[StoredCredential]:
        """Every record."""
        ...

    async def add(self, credential: StoredCredential) -> None:
        """Store a record, durably (committed when this returns)."""
        ...

    async def bind(self, credential_id: str, subscription_id: str) -> StoredCredential | None:
        """Attach Tacker's subscription id to a record."""
        ...

    async def forget(self, credential_ids: list[str]) -> None:
        """Delete records (their credentials are refused from then on)."""
        ...
