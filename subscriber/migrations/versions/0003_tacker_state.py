"""own write-backs (echo filter) and a key-value table (reconciler watermark)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "own_op_occs",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("vnf_instance_id", sa.String(255), nullable=False),
        sa.Column("op_occ_id", sa.String(255), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("op_occ_id", name="uq_own_op_occs_op_occ"),
    )
    op.create_index("ix_own_op_occs_instance", "own_op_occs", ["vnf_instance_id", "created_at"])
    op.create_table(
        "kv",
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("kv")
    op.drop_index("ix_own_op_occs_instance", "own_op_occs")
    op.drop_table("own_op_occs")
