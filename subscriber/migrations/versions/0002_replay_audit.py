"""replay marker on events, audit trail

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("replay_mode", sa.String(16), nullable=True))
    op.create_table(
        "audit",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("mode", sa.String(16), nullable=True),
        sa.Column("dry_run", sa.Boolean, nullable=False),
        sa.Column("event_ids", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
    )
    op.create_index("ix_audit_at", "audit", ["at"])


def downgrade() -> None:
    op.drop_index("ix_audit_at", "audit")
    op.drop_table("audit")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("replay_mode")
