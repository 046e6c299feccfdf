"""Which attempt of its op-occ a transition belongs to.

Tacker's retry and rollback re-enter states of the same op-occ. After
FAILED_TEMP a retry sends PROCESSING again, then COMPLETED or FAILED_TEMP; a
rollback sends ROLLING_BACK, then ROLLED_BACK or FAILED_TEMP (TACKER.md §2).
Keyed by (op-occ, state, status) alone, the second PROCESSING or FAILED_TEMP
would fold into the first and be lost. A notification carries no attempt
counter, only its ``timeStamp`` (whole seconds from a v2 Tacker), so:

* Attempt 0 is the op-occ's first run. By Tacker's state machine only
  PROCESSING (retry), ROLLING_BACK (rollback) and FAILED (fail) follow
  FAILED_TEMP; so a transition other than FAILED notified after a FAILED_TEMP
  of the current attempt opens the next attempt (a COMPLETED there means a
  retry whose PROCESSING we have not seen yet).
* Copies of one transition (HTTP and Kafka, two subscriptions, the
  reconciler) are notified within a second or so of each other and get the
  same attempt: a FAILED_TEMP only opens an attempt when notified more than
  :data:`COPY_SPREAD` seconds after the current attempt's FAILED_TEMP.
* A transition belongs to the newest attempt opened at or before its
  (timeStamp, state rank). One without a usable timeStamp (the reconciler's
  implied states) opens none: STARTING is always attempt 0, anything else
  joins the op-occ's newest attempt.

Ties cannot be ordered: a retry notified in the same second as its
FAILED_TEMP is taken for a copy of the first run's PROCESSING and dropped as a
duplicate, as before attempts existed. Attempts can lose such a transition;
they never make one run twice.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["COPY_SPREAD", "Seen", "attempt_of", "notified_at"]

# Copies of one notification are made within this many seconds of each other.
COPY_SPREAD = 2.0

_FAILED_TEMP = "FAILED_TEMP"


@dataclass(frozen=True, slots=True)
class Seen:
    """A stored transition of the op-occ, as far as attempts care."""

    state: str
    rank: int
    notified_at: float | None
    attempt: int


def notified_at(time_stamp: str | None) -> float | None:
    """A notification's ``timeStamp`` as epoch seconds; ``None`` if absent or unreadable."""
    if not time_stamp:
        return None
    try:
        value = dt.datetime.fromisoformat(time_stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def attempt_of(history: Sequence[Seen], state: str, rank: int, at: float | None) -> int:
    """The attempt of a transition of an op-occ whose stored transitions are ``history``.

    Arguments:
        history: the op-occ's transitions stored so far (any order).
        state, rank: the new transition's operationState and its state rank.
        at: its timeStamp as epoch seconds (see :func:`notified_at`).
    """
    if state == "STARTING":
        return 0
    if at is None:
        return max((h.attempt for h in history), default=0)
    current = max(
        (
            h.attempt
            for h in history
            if h.notified_at is not None and (h.notified_at, h.rank) <= (at, rank)
        ),
        default=0,
    )
    if state == "FAILED":
        return current
    spread = COPY_SPREAD if state == _FAILED_TEMP else 0.0
    for h in history:
        if (
            h.state == _FAILED_TEMP
            and h.attempt == current
            and h.notified_at is not None
            and at - h.notified_at > spread
        ):
            return current + 1
    return current
