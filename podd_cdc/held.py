"""What the cutter holds between two cuts: each change waiting (`Pending`), each Qlik
transaction kept up to date as it is fed (`Group`), and each partition's reading state
(`PartitionState`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec

from podd_cdc.records import Change, Position


class Pending(msgspec.Struct, gc=False):
    """A change held, untracked by the cyclic collector as the records are
    (`podd_cdc.records`): it holds only records and numbers."""

    at: Position
    change: Change
    arrived: float
    size: int = 0  # the source message's bytes: what holding it costs, roughly
    taken: bool = False  # chosen for a delta (the cut drops it from its partition's list)


@dataclass
class Group:
    """A Qlik transaction held (or a change without one), kept up to date as it is fed, so
    a look costs the transactions held, not the changes."""

    transaction: bool
    lo: Any
    hi: Any
    items: list[Pending] = field(default_factory=list)
    first: float = math.inf  # when its first change arrived
    counters: set[int] = field(default_factory=set)
    lasts: list[int | None] = field(default_factory=list)

    def add(self, item: Pending) -> None:
        change = item.change
        self.items.append(item)
        self.first = min(self.first, item.arrived)
        sequence = change.cut_key
        if sequence < self.lo:
            self.lo = sequence
        elif sequence > self.hi:
            self.hi = sequence
        self.counters.add(change.counter or 0)
        if change.last_in_transaction:
            self.lasts.append(change.counter)

    def complete(self) -> bool:
        """No transaction, or its last event and every counter from 1 to it, once each."""
        if not self.transaction:
            return True
        if len(self.lasts) != 1:
            return False
        last = self.lasts[0] or 0
        n = len(self.items)
        counters = self.counters
        return n == last == len(counters) and min(counters) >= 1 and max(counters) == n


def group_key(change: Change) -> Any:
    return change.transaction if change.transaction is not None else change.identity


@dataclass
class PartitionState:
    next_offset: int
    prev_end: int
    refresh_done: int
    last_key: Any = None  # Qlik: last changeSequence read; DataWorks: last heartbeat
    pending: list[Pending] = field(default_factory=list)


def untaken(pending: list[Pending], taken: int) -> list[Pending]:
    """`pending` without its `taken` items (`taken` of them), walked only as far as the last
    one: in a backlog a partition holds far more than a delta takes, and walking every
    change held cost as much as the rest of the cut's bookkeeping."""
    if not taken:
        return pending
    kept: list[Pending] = []
    for i, item in enumerate(pending):
        if not item.taken:
            kept.append(item)
            continue
        taken -= 1
        if not taken:
            return kept + pending[i + 1 :]
    return kept


@dataclass(frozen=True)
class Choice:
    """What a look found to cut: how many changes, when the first of them arrived, the
    bound, and the changes themselves, listed only if the delta is due (a look that finds
    none due walked every change held, at every look)."""

    count: int
    oldest: float
    bound: Any
    items: Callable[[], list[Pending]]

    NONE: ClassVar[Choice]

    @classmethod
    def of(cls, items: list[Pending], bound: Any) -> Choice:
        return cls(
            len(items), min((i.arrived for i in items), default=math.inf), bound, lambda: items
        )


Choice.NONE = Choice(0, math.inf, None, list)
