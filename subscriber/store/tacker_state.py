"""What talking back to Tacker needs to remember: our own MODIFY_INFO op-occs, the watermark.

Own op-occs (the echo filter): before each write-back PATCH a row "echo
expected for instance X" is written (``op_occ_id`` NULL), and the PATCH's 202
``Location`` fills in the op-occ id. A notification of a recorded op-occ is our
echo. An intent whose 202 never arrived (crash, timeout) still tells the echo
filter that a MODIFY_INFO of that instance may be ours, to be checked against
Tacker.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from subscriber.store.database import Database
from subscriber.store.tables import kv, own_op_occs
from subscriber.store.writer import INGEST, WriteQueue

__all__ = ["TackerStateStore"]


class TackerStateStore:
    """Reads and writes of ``own_op_occs`` and ``kv``.

    Its echo methods are what the Tacker client (``EchoRecorder``) and the
    echo filter (``EchoLedger``) are given; both protocols live in
    :mod:`subscriber.tacker.ports`, so neither depends on the store.
    """

    def __init__(self, db: Database, *, writer: WriteQueue) -> None:
        self._db = db
        self._writer = writer

    async def expect_echo(self, vnf_instance_id: str) -> int:
        """Record, durably, that a PATCH of ``vnf_instance_id`` is about to be sent.

        Returns:
            the intent's id, for :meth:`confirm_echo`.
        """
        values = {"vnf_instance_id": vnf_instance_id, "op_occ_id": None, "created_at": time.time()}

        def write(conn: Connection) -> int:
            key = conn.execute(sa.insert(own_op_occs).values(values)).inserted_primary_key
            assert key is not None
            return int(key[0])

        # INGEST priority: it must be durable before the PATCH leaves.
        return await self._writer.run(write, priority=INGEST)

    async def confirm_echo(self, intent_id: int, op_occ_id: str) -> None:
        """Attach the MODIFY_INFO op-occ id (from the 202 Location) to an intent."""

        def write(conn: Connection) -> None:
            exists = conn.scalar(
                sa.select(own_op_occs.c.id).where(own_op_occs.c.op_occ_id == op_occ_id)
            )
            if exists is None:
                conn.execute(
                    sa.update(own_op_occs)
                    .where(own_op_occs.c.id == intent_id)
                    .values(op_occ_id=op_occ_id)
                )

        await self._writer.run(write, priority=INGEST)

    async def drop_echo(self, intent_id: int) -> None:
        """Forget an intent whose PATCH Tacker refused (no op-occ, so no echo)."""

        def write(conn: Connection) -> None:
            conn.execute(
                sa.delete(own_op_occs).where(
                    own_op_occs.c.id == intent_id, own_op_occs.c.op_occ_id.is_(None)
                )
            )

        await self._writer.run(write)

    async def record_own(self, vnf_instance_id: str, op_occ_id: str) -> None:
        """Record an op-occ as ours outright (found by checking an open intent with Tacker)."""

        def write(conn: Connection) -> None:
            exists = conn.scalar(
                sa.select(own_op_occs.c.id).where(own_op_occs.c.op_occ_id == op_occ_id)
            )
            if exists is None:
                conn.execute(
                    sa.insert(own_op_occs).values(
                        vnf_instance_id=vnf_instance_id, op_occ_id=op_occ_id, created_at=time.time()
                    )
                )

        await self._writer.run(write)

    async def is_own(self, op_occ_id: str) -> bool:
        q = sa.select(own_op_occs.c.id).where(own_op_occs.c.op_occ_id == op_occ_id)
        return await self._db.read(lambda conn: conn.scalar(q)) is not None

    async def open_intents(self, vnf_instance_id: str, since: float) -> int:
        """How many PATCHes of this instance, begun after ``since``, never got their 202."""
        q = (
            sa.select(sa.func.count())
            .select_from(own_op_occs)
            .where(
                own_op_occs.c.vnf_instance_id == vnf_instance_id,
                own_op_occs.c.op_occ_id.is_(None),
                own_op_occs.c.created_at >= since,
            )
        )
        count: Any = await self._db.read(lambda conn: conn.scalar(q))
        return int(count or 0)

    async def own_op_occs(self, vnf_instance_id: str) -> list[str]:
        q = (
            sa.select(own_op_occs.c.op_occ_id)
            .where(
                own_op_occs.c.vnf_instance_id == vnf_instance_id,
                own_op_occs.c.op_occ_id.is_not(None),
            )
            .order_by(own_op_occs.c.id)
        )
        rows = await self._db.read(lambda conn: conn.execute(q).all())
        return [str(r[0]) for r in rows]

    async def get_value(self, key: str) -> str | None:
        q = sa.select(kv.c.value).where(kv.c.key == key)
        value = await self._db.read(lambda conn: conn.scalar(q))
        return None if value is None else str(value)

    async def set_value(self, key: str, value: str) -> None:
        now = time.time()

        def write(conn: Connection) -> None:
            done = conn.execute(
                sa.update(kv).where(kv.c.key == key).values(value=value, updated_at=now)
            )
            if done.rowcount == 0:
                conn.execute(sa.insert(kv).values(key=key, value=value, updated_at=now))

        await self._writer.run(write)

    async def delete_value(self, key: str) -> bool:
        """Remove the value under ``key``; whether there was one."""

        def write(conn: Connection) -> bool:
            return bool(conn.execute(sa.delete(kv).where(kv.c.key == key)).rowcount)

        return bool(await self._writer.run(write))
