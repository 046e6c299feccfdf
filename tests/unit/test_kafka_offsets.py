"""OffsetTracker: commit points for out-of-order durable appends."""

from __future__ import annotations

from subscriber.ingest.offsets import OffsetTracker, Partition

TP = Partition("t", 0)


def test_commit_point_waits_for_the_first_unstored_record() -> None:
    tracker = OffsetTracker()
    tracker.assign([TP])
    tickets = [tracker.track(TP, offset) for offset in (10, 11, 12, 13)]
    assert tracker.committable() == {}
    tracker.done(tickets[2])
    tracker.done(tickets[3])
    assert tracker.committable() == {}, "10 and 11 are not stored yet"
    tracker.done(tickets[0])
    assert tracker.committable() == {TP: 11}
    tracker.mark_committed({TP: 11})
    assert tracker.committable() == {}
    tracker.done(tickets[1])
    assert tracker.committable() == {TP: 14}
    assert tracker.in_flight(TP) == 0
    assert tracker.next_unstored(TP) == 14


def test_revoked_or_reset_partitions_drop_stale_completions() -> None:
    tracker = OffsetTracker()
    tracker.assign([TP])
    old = tracker.track(TP, 5)
    tracker.revoke([TP])
    tracker.assign([TP])
    assert tracker.done(old) is False
    assert tracker.committable() == {}

    fresh = tracker.track(TP, 7)
    # The position went back (offset reset): a new generation starts.
    reset = tracker.track(TP, 0)
    assert tracker.done(fresh) is False
    assert tracker.done(reset) is True
    assert tracker.committable() == {TP: 1}


def test_forget_progress_commits_nothing_from_before() -> None:
    tracker = OffsetTracker()
    tracker.assign([TP])
    ticket = tracker.track(TP, 3)
    tracker.forget_progress()
    assert tracker.done(ticket) is False
    assert tracker.committable() == {}
