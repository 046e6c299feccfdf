"""The lane's ordering decision as a pure function."""

from __future__ import annotations

from subscriber.dispatcher import choose_next
from subscriber.store import EventRow

RANK = {"STARTING": 0, "PROCESSING": 1, "COMPLETED": 2, "FAILED_TEMP": 2, "ROLLED_BACK": 3}


def ev(
    id: int,
    occ: str,
    state: str,
    status: str = "pending",
    at: float = 100.0,
    operation: str = "INSTANTIATE",
    attempt: int = 0,
) -> EventRow:
    return EventRow(
        id=id,
        received_at=at,
        updated_at=at,
        source="http",
        notification_type="VnfLcmOperationOccurrenceNotification",
        notification_id=str(id),
        vnf_instance_id="i",
        vnf_lcm_op_occ_id=occ,
        operation=operation,
        operation_state=state,
        notification_status="RESULT",
        state_rank=RANK[state],
        dedup_key=f"{occ}|{state}",
        api_version=None,
        body="{}",
        meta=None,
        status=status,
        status_detail=None,
        op_occ_attempt=attempt,
    )


def states(*events: EventRow) -> list[tuple[str, int, str, int, int]]:
    return [
        (e.vnf_lcm_op_occ_id or "", e.id, e.status, e.state_rank or 0, e.op_occ_attempt)
        for e in events
    ]


def test_lowest_state_of_the_oldest_op_occ_first() -> None:
    a_done = ev(1, "A", "STARTING", "done")
    b_start = ev(2, "B", "STARTING")
    a_completed = ev(3, "A", "COMPLETED")
    a_processing = ev(4, "A", "PROCESSING")
    d = choose_next(
        [b_start, a_completed, a_processing],
        states(a_done, b_start, a_completed, a_processing),
        {},
        200.0,
        0.3,
    )
    assert d.event is a_processing


def test_later_state_waits_inside_the_reorder_window_for_its_predecessor() -> None:
    completed = ev(1, "A", "COMPLETED", at=100.0)
    d = choose_next([completed], states(completed), {}, now=100.1, reorder_window=0.3)
    assert d.event is None and d.wait_until == 100.3
    d = choose_next([completed], states(completed), {}, now=100.31, reorder_window=0.3)
    assert d.event is completed


def test_no_wait_when_the_predecessor_was_seen() -> None:
    processing = ev(1, "A", "PROCESSING", "done")
    completed = ev(2, "A", "COMPLETED", at=100.0)
    d = choose_next([completed], states(processing, completed), {}, now=100.0, reorder_window=5)
    assert d.event is completed


def test_modify_info_starts_at_processing_without_waiting() -> None:
    processing = ev(1, "M", "PROCESSING", at=100.0, operation="MODIFY_INFO")
    d = choose_next([processing], states(processing), {}, now=100.0, reorder_window=5)
    assert d.event is processing


def test_older_than_handled_is_stale() -> None:
    completed = ev(1, "A", "COMPLETED", "done")
    processing = ev(2, "A", "PROCESSING")
    d = choose_next([processing], states(completed, processing), {}, now=200.0, reorder_window=0.3)
    assert d.stale is processing


def test_same_rank_after_failed_temp_is_not_stale() -> None:
    failed_temp = ev(1, "A", "FAILED_TEMP", "done")
    completed = ev(2, "A", "COMPLETED")
    d = choose_next([completed], states(failed_temp, completed), {}, now=200.0, reorder_window=0.3)
    assert d.event is completed


def test_job_in_backoff_blocks_its_lane_until_due() -> None:
    retrying = ev(1, "A", "COMPLETED", "retry")
    later = ev(2, "B", "STARTING")
    d = choose_next(
        [retrying, later], states(retrying, later), {1: 150.0}, now=120.0, reorder_window=0.3
    )
    assert d.event is None and d.wait_until == 150.0
    d = choose_next(
        [retrying, later], states(retrying, later), {1: 150.0}, now=151.0, reorder_window=0.3
    )
    assert d.event is retrying


def test_a_retry_runs_after_the_failed_temp_it_retries() -> None:
    starting = ev(1, "A", "STARTING", "done")
    processing = ev(2, "A", "PROCESSING", "done")
    failed_temp = ev(3, "A", "FAILED_TEMP", "done")
    retry = ev(4, "A", "PROCESSING", attempt=1)
    completed = ev(5, "A", "COMPLETED", attempt=1)
    d = choose_next(
        [completed, retry],
        states(starting, processing, failed_temp, retry, completed),
        {},
        now=200.0,
        reorder_window=0.3,
    )
    assert d.event is retry


def test_a_late_first_run_transition_is_stale_once_a_retry_was_handled() -> None:
    failed_temp = ev(1, "A", "FAILED_TEMP", "done")
    retry = ev(2, "A", "PROCESSING", "done", attempt=1)
    late = ev(3, "A", "COMPLETED")  # attempt 0: older than the retry
    d = choose_next([late], states(failed_temp, retry, late), {}, now=200.0, reorder_window=0.3)
    assert d.stale is late


def test_choose_next_lets_a_replayed_event_through_the_stale_check() -> None:
    handled = ev(2, "o", "COMPLETED", status="done")
    old = ev(1, "o", "PROCESSING")
    seen = [("o", 1, "pending", 1, 0), ("o", 2, "done", 2, 0)]
    assert choose_next([old], seen, {}, 200.0, 0.3).stale
    old.replay_mode = "resume"
    decision = choose_next([old], seen, {}, 200.0, 0.3)
    assert decision.event is old and decision.stale is None
    assert handled.replay_mode is None
