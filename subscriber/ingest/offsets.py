"""Which fetched offsets are durably stored, and how far each partition may commit.

Records of one partition are appended concurrently, so they become durable out
of order. A partition may be committed up to (not including) its first record
that is not stored yet: committing offset ``N`` tells Kafka that every record
before ``N`` is safe.

Each partition's state has a generation. Revocation, re-assignment, or a fetch
position that moves backwards (a reset after the broker lost the topic) starts
a new generation, and completions of the old one are dropped: they can no
longer move the commit point of records that belong to someone else.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["OffsetTracker", "Partition", "Ticket"]


class Partition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class Ticket:
    """Handed out for each fetched record; given back once the record is stored."""

    tp: Partition
    generation: int
    offset: int


@dataclass(slots=True)
class _State:
    generation: int
    pending: deque[int] = field(default_factory=deque)
    done: set[int] = field(default_factory=set)
    last_tracked: int | None = None
    # One past the last record of the stored prefix: what may be committed.
    stored_upto: int | None = None
    committed: int | None = None


class OffsetTracker:
    """Commit points per partition for out-of-order durable appends. Not thread-safe."""

    def __init__(self) -> None:
        self._generations = itertools.count(1)
        self._parts: dict[Partition, _State] = {}

    def assign(self, tps: Iterable[Partition]) -> None:
        """Start fresh state for newly assigned partitions."""
        for tp in tps:
            self._parts[tp] = _State(next(self._generations))

    def forget_progress(self) -> None:
        """Start a new generation everywhere: nothing tracked so far will be committed.

        Used after the broker was unreachable: it may have come back without
        the old log (or the topic was recreated), and committing offsets from
        before would skip records of the new log. Not committing is always safe:
        the records are redelivered and collapse on the store's dedup key.
        """
        for tp in list(self._parts):
            self._parts[tp] = _State(next(self._generations))

    def revoke(self, tps: Iterable[Partition]) -> None:
        """Forget partitions; completions of their records are dropped from now on."""
        for tp in tps:
            self._parts.pop(tp, None)

    def track(self, tp: Partition, offset: int) -> Ticket:
        """Note a fetched record that is about to be stored."""
        state = self._parts.get(tp)
        if state is None or (state.last_tracked is not None and offset <= state.last_tracked):
            # Unknown partition, or the position went back (offset reset): the
            # old records no longer decide this partition's commit point.
            committed = state.committed if state is not None else None
            state = self._parts[tp] = _State(next(self._generations), committed=committed)
        state.pending.append(offset)
        state.last_tracked = offset
        return Ticket(tp, state.generation, offset)

    def done(self, ticket: Ticket) -> bool:
        """Note that a record is durably stored.

        Returns:
            ``False`` when the ticket is stale (its partition was revoked or
            reset since), in which case nothing changes.
        """
        state = self._parts.get(ticket.tp)
        if state is None or state.generation != ticket.generation:
            return False
        state.done.add(ticket.offset)
        pending = state.pending
        while pending and pending[0] in state.done:
            offset = pending.popleft()
            state.done.discard(offset)
            state.stored_upto = offset + 1
        return True

    def committable(self, tps: Iterable[Partition] | None = None) -> dict[Partition, int]:
        """Offsets to commit: partitions whose stored prefix moved since the last commit."""
        wanted = self._parts.keys() if tps is None else [tp for tp in tps if tp in self._parts]
        out: dict[Partition, int] = {}
        for tp in wanted:
            state = self._parts[tp]
            if state.stored_upto is not None and state.stored_upto != state.committed:
                out[tp] = state.stored_upto
        return out

    def mark_committed(self, offsets: dict[Partition, int]) -> None:
        """Record a successful commit (ignores partitions revoked meanwhile)."""
        for tp, offset in offsets.items():
            state = self._parts.get(tp)
            if state is not None:
                state.committed = offset

    def in_flight(self, tp: Partition) -> int:
        """Records of ``tp`` tracked but not yet stored, or stored after a gap."""
        state = self._parts.get(tp)
        return len(state.pending) if state is not None else 0

    def next_unstored(self, tp: Partition) -> int | None:
        """The first offset of ``tp`` not known to be stored (``None``: nothing seen)."""
        state = self._parts.get(tp)
        if state is None:
            return None
        if state.pending:
            return state.pending[0]
        return state.stored_upto

    def committed(self, tp: Partition) -> int | None:
        """The last offset we committed for ``tp`` in this assignment."""
        state = self._parts.get(tp)
        return state.committed if state is not None else None

    def partitions(self) -> list[Partition]:
        return list(self._parts)
