"""What a job hands back to the management-driver hook that waits for it: our
``vimConnectionInfo`` entry, which the hook script returns to Tacker inside the operation
(no MODIFY_INFO needed).

The entry holds the cluster's bearer token, and the job (the worker process) and the
hook's answer (the ingest process) may be different processes, before and after a
restart; so the entry is kept in the store, but never in clear: it is sealed with
AES-GCM under a key derived from ``hooks.token`` (which only ``serve`` and the hook
script know), bound to its op-occ, and refused once ``hooks.answer_ttl`` has passed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from typing import Any

from schemas.hooks import answer_key
from subscriber.kernel.ports import KubernetesAccess
from subscriber.store import TackerStateStore
from subscriber.vim_connection import vim_connection_entry

__all__ = ["HookAnswers"]

_KEY_CONTEXT = b"lccn-subscriber hook answer v1\0"


class HookAnswers:
    """Seals a job's ``vimConnectionInfo`` entry for its op-occ's hook; opens it for the
    hook's answer.

    Arguments:
        values: the store's small values.
        token: ``hooks.token``; the sealing key is derived from it.
        vim_key: the ``vimConnectionInfo`` key of our entry (``tacker.vim_key``).
        ttl: seconds a sealed entry may be handed out.
    """

    def __init__(self, values: TackerStateStore, token: str, *, vim_key: str, ttl: float) -> None:
        if not token:
            raise ValueError("a hook answer is sealed with hooks.token: none is set")
        self._values = values
        self._key = hashlib.sha256(_KEY_CONTEXT + token.encode("utf-8")).digest()
        self._vim_key = vim_key
        self._ttl = ttl

    async def hand_back(
        self, op_occ_id: str, vnf_instance_id: str, access: KubernetesAccess
    ) -> None:
        """Seal our entry for ``access`` for the op-occ's hook (replacing an earlier one)."""
        entry = vim_connection_entry(vnf_instance_id, access, key=self._vim_key, api="v2")
        await self._values.set_value(answer_key(op_occ_id), self._seal(op_occ_id, entry))

    async def read(self, op_occ_id: str) -> dict[str, Any] | None:
        """The ``vimConnectionInfo`` handed back for the op-occ (``None``: none, or expired)."""
        raw = await self._values.get_value(answer_key(op_occ_id))
        if raw is None:
            return None
        opened = self._open(op_occ_id, raw)
        if opened is None:
            await self._values.delete_value(answer_key(op_occ_id))
        return opened

    def _seal(self, op_occ_id: str, entry: dict[str, Any]) -> str:
        # Imported here: cryptography costs megabytes in every process that loads it.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = os.urandom(12)
        box = AESGCM(self._key).encrypt(nonce, json.dumps(entry).encode(), op_occ_id.encode())
        sealed = {
            "v": 1,
            "expires": time.time() + self._ttl,
            "box": base64.b64encode(nonce + box).decode(),
        }
        return json.dumps(sealed, separators=(",", ":"))

    def _open(self, op_occ_id: str, raw: str) -> dict[str, Any] | None:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            sealed = json.loads(raw)
            if float(sealed["expires"]) < time.time():
                return None
            data = base64.b64decode(sealed["box"])
            plain = AESGCM(self._key).decrypt(data[:12], data[12:], op_occ_id.encode())
        except (ValueError, KeyError, TypeError, InvalidTag):
            # Another token sealed it (hooks.token changed), or it was tampered with.
            return None
        entry: dict[str, Any] = json.loads(plain)
        return entry
