"""lease fencing tokens: a counter that grows on every take-over of a lane

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        # Every job and step write of a lane is conditional on (owner, token):
        # a holder that lost the lane (paused past its lease) writes nothing.
        batch.add_column(sa.Column("token", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("token")
