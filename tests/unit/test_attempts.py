"""Attempts of an op-occ: a retry's transitions are new, resent copies are not."""

from __future__ import annotations

from subscriber.store.attempts import Seen, attempt_of, notified_at

RANK = {
    "STARTING": 0,
    "PROCESSING": 1,
    "COMPLETED": 2,
    "FAILED_TEMP": 2,
    "FAILED": 2,
    "ROLLING_BACK": 2,
    "ROLLED_BACK": 3,
}


def run(*transitions: tuple[str, float | None]) -> list[int]:
    """Feed transitions in arrival order; return the attempt each gets."""
    history: list[Seen] = []
    out = []
    for state, at in transitions:
        attempt = attempt_of(history, state, RANK[state], at)
        history.append(Seen(state, RANK[state], at, attempt))
        out.append(attempt)
    return out


def test_a_run_without_failure_is_attempt_zero() -> None:
    assert run(("STARTING", 0), ("PROCESSING", 1), ("COMPLETED", 9)) == [0, 0, 0]


def test_retry_opens_an_attempt_and_a_second_failure_belongs_to_it() -> None:
    assert run(
        ("STARTING", 0),
        ("PROCESSING", 1),
        ("FAILED_TEMP", 5),
        ("PROCESSING", 20),  # POST .../retry
        ("FAILED_TEMP", 30),
        ("PROCESSING", 40),  # retried again
        ("COMPLETED", 50),
    ) == [0, 0, 0, 1, 1, 2, 2]


def test_rollback_opens_an_attempt() -> None:
    assert run(
        ("STARTING", 0),
        ("PROCESSING", 1),
        ("FAILED_TEMP", 5),
        ("ROLLING_BACK", 8),
        ("ROLLED_BACK", 9),
    ) == [0, 0, 0, 1, 1]
    # A failed rollback fails the new attempt; fail then ends it for good.
    assert run(
        ("PROCESSING", 1),
        ("FAILED_TEMP", 5),
        ("ROLLING_BACK", 8),
        ("FAILED_TEMP", 12),
        ("FAILED", 20),
    ) == [0, 0, 1, 1, 1]


def test_copies_of_a_transition_keep_its_attempt() -> None:
    # The FAILED_TEMP sent to a second subscription straddles a second boundary;
    # the reconciler's copy is stamped a moment earlier; a late copy of the
    # first PROCESSING arrives after the retry.
    assert run(
        ("PROCESSING", 1),
        ("FAILED_TEMP", 5),
        ("FAILED_TEMP", 6),
        ("FAILED_TEMP", 4),
        ("PROCESSING", 20),
        ("PROCESSING", 1),
        ("PROCESSING", 21),
    ) == [0, 0, 0, 0, 1, 0, 1]


def test_out_of_order_arrival_still_tells_the_attempts_apart() -> None:
    # The retry's FAILED_TEMP overtakes the retry's PROCESSING; the retry's
    # COMPLETED overtakes its PROCESSING.
    assert run(("PROCESSING", 1), ("FAILED_TEMP", 5), ("FAILED_TEMP", 30), ("PROCESSING", 20)) == [
        0,
        0,
        1,
        1,
    ]
    assert run(("PROCESSING", 1), ("FAILED_TEMP", 5), ("COMPLETED", 30), ("PROCESSING", 20)) == [
        0,
        0,
        1,
        1,
    ]


def test_a_retry_in_the_same_second_cannot_be_told_from_a_copy() -> None:
    # Dropped as a duplicate of the first PROCESSING, never run twice.
    assert run(("PROCESSING", 1), ("FAILED_TEMP", 5), ("PROCESSING", 5)) == [0, 0, 0]


def test_transitions_without_a_time_join_the_newest_attempt() -> None:
    history = [
        Seen("STARTING", 0, 0, 0),
        Seen("FAILED_TEMP", 2, 5, 0),
        Seen("PROCESSING", 1, 20, 1),
        Seen("COMPLETED", 2, 30, 1),
    ]
    assert attempt_of(history, "PROCESSING", 1, None) == 1
    assert attempt_of(history, "STARTING", 0, None) == 0
    assert attempt_of([], "PROCESSING", 1, None) == 0


def test_notified_at_reads_tacker_time_stamps() -> None:
    assert notified_at("2026-11-22T07:00:05Z") == notified_at("2026-11-22T07:00:05+00:00")
    assert notified_at("2026-11-22T07:00:05.250000") == notified_at("2026-11-22T07:00:05Z") + 0.25  # type: ignore[operator]
    assert notified_at("yesterday") is None
    assert notified_at("") is None
