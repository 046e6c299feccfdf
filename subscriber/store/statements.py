"""Statements of the hot paths, built once with bind parameters.

Building a SQLAlchemy statement and computing its cache key costs more than
executing it on SQLite; the dispatcher and runner run these for every event,
so they are built at import and executed with parameters.
"""

from __future__ import annotations

import sqlalchemy as sa

from subscriber.store.tables import EventStatus, JobStatus, StepStatus, events, jobs, leases, steps

B = sa.bindparam

SET_EVENT_STATUS = (
    events.update()
    .where(events.c.id == B("b_event_id"))
    .values(status=B("b_status"), status_detail=B("b_detail"), updated_at=B("b_now"))
)

INSERT_JOB = (
    jobs.insert()
    .values(
        event_id=B("b_event_id"),
        handler=B("b_handler"),
        mode=B("b_mode"),
        status=JobStatus.RUNNING,
        attempts=0,
        created_at=B("b_now"),
        updated_at=B("b_now"),
    )
    .returning(jobs.c.id)
)

UPDATE_JOB = (
    jobs.update()
    .where(jobs.c.id == B("b_job_id"))
    .values(
        status=B("b_status"),
        next_attempt_at=B("b_next_attempt_at"),
        error_class=B("b_error_class"),
        last_error=B("b_last_error"),
        updated_at=B("b_now"),
        attempts=sa.func.coalesce(B("b_attempts", type_=sa.Integer), jobs.c.attempts),
    )
)

NEWEST_JOB = (
    sa.select(jobs).where(jobs.c.event_id == B("b_event_id")).order_by(jobs.c.id.desc()).limit(1)
)
JOB_STEPS = sa.select(steps).where(steps.c.job_id == B("b_job_id")).order_by(steps.c.idx)

STEP_STARTED_UPDATE = (
    steps.update()
    .where(steps.c.job_id == B("b_job_id"), steps.c.name == B("b_name"))
    .values(
        status=StepStatus.RUNNING,
        attempts=steps.c.attempts + 1,
        started_at=B("b_now"),
        finished_at=None,
        error=None,
        idx=B("b_idx"),
    )
)
STEP_STARTED_INSERT = steps.insert().values(
    job_id=B("b_job_id"),
    idx=B("b_idx"),
    name=B("b_name"),
    idempotent=B("b_idempotent"),
    status=StepStatus.RUNNING,
    attempts=1,
    started_at=B("b_now"),
)

# A step that had a "running" checkpoint already counted its attempt.
STEP_FINISHED_UPDATE = (
    steps.update()
    .where(steps.c.job_id == B("b_job_id"), steps.c.name == B("b_name"))
    .values(
        status=B("b_status"),
        finished_at=B("b_now"),
        error=B("b_error"),
        output=B("b_output"),
        result=B("b_result"),
        attempts=sa.case(
            (steps.c.status == StepStatus.RUNNING, steps.c.attempts), else_=steps.c.attempts + 1
        ),
    )
)
STEP_FINISHED_INSERT = steps.insert().values(
    job_id=B("b_job_id"),
    idx=B("b_idx"),
    name=B("b_name"),
    idempotent=B("b_idempotent"),
    status=B("b_status"),
    attempts=1,
    started_at=B("b_started_at"),
    finished_at=B("b_now"),
    error=B("b_error"),
    output=B("b_output"),
    result=B("b_result"),
)

LANE_OPEN_EVENTS = (
    sa.select(events)
    .where(events.c.vnf_instance_id == B("b_lane"), events.c.status.in_(EventStatus.OPEN))
    .order_by(events.c.id)
)
OP_OCC_STATES = sa.select(
    events.c.vnf_lcm_op_occ_id,
    events.c.id,
    events.c.status,
    events.c.state_rank,
    events.c.op_occ_attempt,
).where(events.c.vnf_lcm_op_occ_id.in_(B("b_ids", expanding=True)))
RETRY_AT = (
    sa.select(jobs.c.event_id, sa.func.max(jobs.c.next_attempt_at))
    .where(jobs.c.event_id.in_(B("b_ids", expanding=True)), jobs.c.status == JobStatus.RETRY)
    .group_by(jobs.c.event_id)
)

# Acquiring a lease (free, expired, ours, or a dead owner's) bumps its fencing
# token; a released lease keeps its row (expired), so the token never restarts.
LEASE_TAKE = (
    leases.update()
    .where(
        leases.c.lane == B("b_lane"),
        sa.or_(
            leases.c.owner == B("b_owner"),
            leases.c.expires_at < B("b_now"),
            leases.c.owner.in_(B("b_take_over", expanding=True)),
        ),
    )
    .values(
        owner=B("b_owner"),
        acquired_at=B("b_now"),
        expires_at=B("b_expires_at"),
        token=leases.c.token + 1,
    )
    .returning(leases.c.token)
)
_HELD = sa.and_(
    leases.c.lane == B("b_lane"),
    leases.c.owner == B("b_owner"),
    leases.c.token == B("b_token"),
)
# A released lease (expires_at 0) is not renewed: a renewal that reaches the
# database after the job's last write released the lease must not take it back.
LEASE_RENEW = (
    leases.update().where(_HELD, leases.c.expires_at > 0).values(expires_at=B("b_expires_at"))
)
LEASE_RELEASE = leases.update().where(_HELD).values(expires_at=0.0)
# The fence of a write: a no-op update of the lease row, matched only while we
# hold it with our token. On PostgreSQL it also locks the row until commit, so
# a take-over is ordered after the fenced write, never interleaved with it.
LEASE_FENCE = leases.update().where(_HELD).values(token=leases.c.token)
# Before a step starts: held, and not expired either.
LEASE_FENCE_LIVE = (
    leases.update().where(_HELD, leases.c.expires_at > B("b_now")).values(token=leases.c.token)
)

# Attempts (subscriber.store.attempts): the transitions stored for the op-occs that
# ever failed temporarily (which those are: events._failing_op_occs).
OP_OCC_HISTORY = sa.select(
    events.c.vnf_lcm_op_occ_id,
    events.c.operation_state,
    events.c.state_rank,
    events.c.notified_at,
    events.c.op_occ_attempt,
).where(
    events.c.vnf_lcm_op_occ_id.in_(B("b_ids", expanding=True)),
    events.c.status != EventStatus.POISON,
)
