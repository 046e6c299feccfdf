"""cluster inventory: the nodes of each VNF instance's cluster

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cluster_nodes",
        sa.Column("vnf_instance_id", sa.String(255), primary_key=True),
        sa.Column("node_name", sa.String(255), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("vnfc_id", sa.String(255), nullable=False),
        sa.Column("vdu_id", sa.String(255), nullable=True),
        sa.Column("stack_id", sa.String(512), nullable=True),
        sa.Column("server_id", sa.String(255), nullable=True),
        sa.Column("nic_ip", sa.String(64), nullable=False),
        sa.Column("ssh_ip", sa.String(64), nullable=False),
        sa.Column("compute_host", sa.String(255), nullable=True),
        sa.Column("cluster_ip", sa.String(64), nullable=True),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("cluster_nodes")
