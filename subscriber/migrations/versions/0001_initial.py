"""events, jobs, steps, leases

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("received_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("notification_type", sa.String(64), nullable=True),
        sa.Column("notification_id", sa.String(255), nullable=True),
        sa.Column("vnf_instance_id", sa.String(255), nullable=True),
        sa.Column("vnf_lcm_op_occ_id", sa.String(255), nullable=True),
        sa.Column("operation", sa.String(32), nullable=True),
        sa.Column("operation_state", sa.String(32), nullable=True),
        sa.Column("notification_status", sa.String(16), nullable=True),
        sa.Column("state_rank", sa.Integer, nullable=True),
        sa.Column("dedup_key", sa.String(700), nullable=False),
        sa.Column("api_version", sa.String(32), nullable=True),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("meta", sa.Text, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_detail", sa.Text, nullable=True),
        sa.UniqueConstraint("dedup_key", name="uq_events_dedup_key"),
    )
    op.create_index("ix_events_status_instance", "events", ["status", "vnf_instance_id"])
    op.create_index("ix_events_instance", "events", ["vnf_instance_id", "id"])
    op.create_index("ix_events_op_occ", "events", ["vnf_lcm_op_occ_id"])
    op.create_table(
        "jobs",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("event_id", BigId, sa.ForeignKey("events.id"), nullable=False),
        sa.Column("handler", sa.String(64), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.Float, nullable=True),
        sa.Column("error_class", sa.String(32), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_jobs_event", "jobs", ["event_id", "id"])
    op.create_table(
        "steps",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("job_id", BigId, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("idempotent", sa.Boolean, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("output", sa.Text, nullable=True),
        sa.Column("result", sa.Text, nullable=True),
        sa.UniqueConstraint("job_id", "name", name="uq_steps_job_name"),
    )
    op.create_table(
        "leases",
        sa.Column("lane", sa.String(255), primary_key=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("acquired_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
    op.drop_table("steps")
    op.drop_index("ix_jobs_event", "jobs")
    op.drop_table("jobs")
    op.drop_index("ix_events_op_occ", "events")
    op.drop_index("ix_events_instance", "events")
    op.drop_index("ix_events_status_instance", "events")
    op.drop_table("events")
