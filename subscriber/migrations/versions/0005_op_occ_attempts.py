"""op-occ attempts: tell a retried op-occ's repeated states from resent copies

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        # The notification's timeStamp (epoch seconds), when it has one.
        batch.add_column(sa.Column("notified_at", sa.Float, nullable=True))
        # 0 for an op-occ's first run; +1 for each retry or rollback after FAILED_TEMP.
        batch.add_column(
            sa.Column("op_occ_attempt", sa.Integer, nullable=False, server_default="0")
        )
    # Every append asks which of its op-occs ever failed temporarily: a tiny
    # index of just those answers it without reading any event row.
    op.create_index(
        "ix_events_failed_temp_op_occ",
        "events",
        ["vnf_lcm_op_occ_id"],
        sqlite_where=sa.text("operation_state = 'FAILED_TEMP'"),
        postgresql_where=sa.text("operation_state = 'FAILED_TEMP'"),
    )


def downgrade() -> None:
    op.drop_index("ix_events_failed_temp_op_occ", "events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("op_occ_attempt")
        batch.drop_column("notified_at")
