"""Migration 0007 on both backends: the events' nullable ``traceparent`` column comes and
goes with the revision, and an event stored with one reads it back."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from schemas import parse_notification_data
from subscriber.store import NewEvent, Store
from subscriber.store.migrate import _config, current_revision, upgrade
from tests.factories import op_occ

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _columns(conn: Connection) -> set[str]:
    return {c["name"] for c in sa.inspect(conn).get_columns("events")}


async def test_the_traceparent_column_migrates_down_and_up(store: Store) -> None:
    assert "traceparent" in await store.db.read(_columns)
    body = op_occ()
    stored = await store.events.append(
        NewEvent(
            source="http",
            notification=parse_notification_data(body),
            body=body,
            traceparent=TRACEPARENT,
        )
    )
    row = await store.events.get(stored.event_id)
    assert row is not None and row.traceparent == TRACEPARENT
    assert row.trace_id == "0af7651916cd43dd8448eb211c80319c"

    def downgrade(connection: Connection) -> None:
        from alembic import command

        command.downgrade(_config(connection), "0006")

    await store.db.write_batch([downgrade])
    assert await current_revision(store.db) == "0006"
    assert "traceparent" not in await store.db.read(_columns)
    await upgrade(store.db)
    assert "traceparent" in await store.db.read(_columns)
    again = await store.events.get(stored.event_id)
    assert again is not None and again.traceparent is None and again.trace_id is None
