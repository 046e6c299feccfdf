"""event traceparent: the ingest span's W3C trace context, continued by the job

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        # Set at ingest when tracing is on; the worker process continues that trace.
        batch.add_column(sa.Column("traceparent", sa.String(55), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_column("traceparent")
