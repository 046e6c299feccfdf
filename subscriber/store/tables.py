"""The store's schema (SQLAlchemy Core). Alembic migrations create it; keep both in step."""

from __future__ import annotations

import sqlalchemy as sa

__all__ = [
    "EventStatus",
    "JobStatus",
    "ReplayMode",
    "StepStatus",
    "audit",
    "cluster_nodes",
    "events",
    "jobs",
    "kv",
    "leases",
    "metadata",
    "own_op_occs",
    "steps",
    "with_partial_indexes",
]

metadata = sa.MetaData()

# SQLite only aliases rowid (and so autoincrements) for a plain INTEGER key.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class EventStatus:
    PENDING = "pending"  # stored, waiting for its lane
    RUNNING = "running"  # its job is running
    RETRY = "retry"  # its job failed transiently, next attempt scheduled
    DONE = "done"
    FAILED = "failed"  # its job failed for good; kept for replay
    IGNORED = "ignored"  # no handler for (operation, state)
    STALE = "stale"  # older than a transition already handled for its op-occ
    ECHO = "echo"  # notification of our own write-back
    POISON = "poison"  # unparseable input kept for the operator (Kafka)
    REJECTED = "rejected"  # Tacker contradicts the notification: never run, never replayed

    OPEN = (PENDING, RUNNING, RETRY)
    HANDLED = (RUNNING, RETRY, DONE, FAILED, IGNORED, ECHO)


class ReplayMode:
    """How a replayed event's job starts (``events.replay_mode`` while it waits for its lane)."""

    RESUME = "resume"  # a new job that inherits the done steps of the last one
    ANEW = "anew"  # a new job from step one

    ALL = (RESUME, ANEW)


class JobStatus:
    RUNNING = "running"
    RETRY = "retry"
    DONE = "done"
    FAILED = "failed"


class StepStatus:
    RUNNING = "running"
    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"


events = sa.Table(
    "events",
    metadata,
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
    # Set by `lccn-subscriber replay` (with status back to pending); cleared
    # when the runner creates the replay job.
    sa.Column("replay_mode", sa.String(16), nullable=True),
    # The notification's timeStamp (epoch seconds), when it has one.
    sa.Column("notified_at", sa.Float, nullable=True),
    # 0 for an op-occ's first run; +1 for each retry or rollback after FAILED_TEMP
    # (see subscriber.store.attempts).
    sa.Column("op_occ_attempt", sa.Integer, nullable=False, server_default="0"),
    # The W3C traceparent of the ingest span (tracing on): the job continues its trace.
    sa.Column("traceparent", sa.String(55), nullable=True),
    sa.UniqueConstraint("dedup_key", name="uq_events_dedup_key"),
)
sa.Index("ix_events_status_instance", events.c.status, events.c.vnf_instance_id)
sa.Index("ix_events_instance", events.c.vnf_instance_id, events.c.id)
sa.Index("ix_events_op_occ", events.c.vnf_lcm_op_occ_id)
_FAILED_TEMP_INDEX = "ix_events_failed_temp_op_occ"


def with_partial_indexes() -> sa.MetaData:
    """:data:`metadata` with the partial index of the op-occs that ever failed
    temporarily (migration 0005's ``ix_events_failed_temp_op_occ``), for what makes
    DDL from it or compares a database with it (Alembic's env, a bench's
    ``create_all``); idempotent.

    Not declared at import: naming ``postgresql_where`` imports SQLAlchemy's
    PostgreSQL dialect (~2 MB in each process), into a serve on SQLite too. Queries
    never need the declaration: the database has the index.
    """
    if not any(index.name == _FAILED_TEMP_INDEX for index in events.indexes):
        sa.Index(
            _FAILED_TEMP_INDEX,
            events.c.vnf_lcm_op_occ_id,
            sqlite_where=events.c.operation_state == "FAILED_TEMP",
            postgresql_where=events.c.operation_state == "FAILED_TEMP",
        )
    return metadata


jobs = sa.Table(
    "jobs",
    metadata,
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
sa.Index("ix_jobs_event", jobs.c.event_id, jobs.c.id)

steps = sa.Table(
    "steps",
    metadata,
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

leases = sa.Table(
    "leases",
    metadata,
    sa.Column("lane", sa.String(255), primary_key=True),
    sa.Column("owner", sa.String(255), nullable=False),
    sa.Column("acquired_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
    # The fencing token: +1 on every acquisition; writes of the lane carry it.
    sa.Column("token", sa.BigInteger, nullable=False, server_default="0"),
)

# Who did what to the store by hand (replays, dry runs).
audit = sa.Table(
    "audit",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("actor", sa.String(255), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("mode", sa.String(16), nullable=True),
    sa.Column("dry_run", sa.Boolean, nullable=False),
    sa.Column("event_ids", sa.Text, nullable=False),
    sa.Column("detail", sa.Text, nullable=True),
)
sa.Index("ix_audit_at", audit.c.at)

# The cluster inventory: node name <-> VNFC id <-> stack id <-> IPs <-> role, per VNF instance.
cluster_nodes = sa.Table(
    "cluster_nodes",
    metadata,
    sa.Column("vnf_instance_id", sa.String(255), primary_key=True),
    sa.Column("node_name", sa.String(255), primary_key=True),
    sa.Column("role", sa.String(16), nullable=False),  # master | worker
    sa.Column("vnfc_id", sa.String(255), nullable=False),
    sa.Column("vdu_id", sa.String(255), nullable=True),
    sa.Column("stack_id", sa.String(512), nullable=True),
    sa.Column("server_id", sa.String(255), nullable=True),
    sa.Column("nic_ip", sa.String(64), nullable=False),
    sa.Column("ssh_ip", sa.String(64), nullable=False),
    sa.Column("compute_host", sa.String(255), nullable=True),
    sa.Column("cluster_ip", sa.String(64), nullable=True),  # the API address nodes join
    sa.Column("updated_at", sa.Float, nullable=False),
)

# Our own write-backs: a row is written (op_occ_id NULL: "echo expected for
# this instance") before each PATCH, and given the MODIFY_INFO op-occ id from
# the 202's Location. Notifications of those op-occs are our echo.
own_op_occs = sa.Table(
    "own_op_occs",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("vnf_instance_id", sa.String(255), nullable=False),
    sa.Column("op_occ_id", sa.String(255), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.UniqueConstraint("op_occ_id", name="uq_own_op_occs_op_occ"),
)
sa.Index("ix_own_op_occs_instance", own_op_occs.c.vnf_instance_id, own_op_occs.c.created_at)

# Small named values that must survive a restart (the reconciler's watermark).
kv = sa.Table(
    "kv",
    metadata,
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)
