"""Which held changes a delta takes (docs/contracts/CDC.md "Transactions", "Heartbeat and
the delta cut"). Pure: the cutter passes what it holds and keeps the result.

Qlik: the longest run of complete transactions below the bound, in sequence order, with the
full-load rows that go with them. DataWorks: every change at or below a watermark the topic
passed, counted and aged by eventTime (`EventTimes`), so a look does not walk the changes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from itertools import accumulate
from typing import Any

from podd_cdc.held import Choice, Group, PartitionState, Pending

#: DataWorks watermarks remembered between two cuts, at most (the newest are kept).
MAX_WATERMARKS = 10_000


def qlik_choice(
    parts: dict[str, PartitionState],
    groups: Iterable[Group],
    quiet: set[str],
    previous_bound: Any,
    max_rows: int,
    *,
    refreshes_held: bool,
) -> Choice:
    """The bound is the smallest last-read sequence over the partitions not quiet; every
    transaction taken is complete and below it, and no change left behind sorts below one
    taken. `refreshes_held`: full-load rows are held, to go with the changes after them."""
    bound, everything = qlik_bound(parts, quiet)
    ordered = sorted(groups, key=lambda g: g.lo)
    taken: list[Group] = []
    count = 0
    for group in ordered:
        below = everything or (bound is not None and group.hi <= bound)
        if not (below and group.complete()) or (count >= max_rows and taken):
            break
        taken.append(group)
        count += len(group.items)
    # No change left behind may sort below a change taken: keep the longest such prefix.
    rest_min = min((g.lo for g in ordered[len(taken) :]), default=None)
    while taken:
        top = max(g.hi for g in taken)
        if rest_min is None or top < rest_min:
            break
        dropped = taken.pop()
        rest_min = dropped.lo if rest_min is None else min(rest_min, dropped.lo)
    cut_bound = max((g.hi for g in taken), default=previous_bound)
    if refreshes_held:
        chosen = [i for g in taken for i in g.items]
        return Choice.of(chosen + _refresh_rows(parts, chosen, quiet), cut_bound)
    return Choice(
        sum(len(g.items) for g in taken),
        min((g.first for g in taken), default=math.inf),
        cut_bound,
        lambda: [i for g in taken for i in g.items],
    )


def qlik_bound(parts: dict[str, PartitionState], quiet: set[str]) -> tuple[Any, bool]:
    """The bound over `parts`, of which `quiet` are read to their end (`lowest_newest`)."""
    return lowest_newest([p.last_key for k, p in parts.items() if k not in quiet])


def lowest_newest(newest: list[Any]) -> tuple[Any, bool]:
    """Qlik's bound: the smallest of the newest sequences read in the partitions not quiet
    (None while one of them has none yet), and whether there are none: every partition is
    quiet, and none holds a bound."""
    everything = not newest
    return (None if None in newest or everything else min(newest)), everything


def _refresh_rows(
    parts: dict[str, PartitionState], chosen: list[Pending], quiet: set[str]
) -> list[Pending]:
    """Full-load rows go with the CDC changes after them in their partition, or, in a
    quiet partition with nothing else left, as they are."""
    reach: dict[tuple[str, int], int] = {}
    for item in chosen:
        where = (item.at.topic, item.at.partition)
        reach[where] = max(reach.get(where, -1), item.at.offset)
    ids = {id(i) for i in chosen}
    rows = []
    for key, part in parts.items():
        left = [i for i in part.pending if i.change.cut_key is not None and id(i) not in ids]
        for item in part.pending:
            if item.change.cut_key is not None:
                continue
            limit = reach.get((item.at.topic, item.at.partition), -1)
            if item.at.offset < limit or (key in quiet and not left):
                rows.append(item)
    return rows


class EventTimes:
    """DataWorks: the changes held, counted by eventTime with when the first of each
    arrived, and the watermarks the topic passed since the last cut."""

    def __init__(self) -> None:
        self._held: dict[Any, int] = {}  # how many changes of each eventTime
        self._first: dict[Any, float] = {}  # when the first of them arrived
        self._watermarks: list[int] = []

    def add(self, event_time: Any, now: float) -> None:
        """One change more of `event_time`, arrived at `now` (called once a change: two
        dicts of plain values, not a tuple made and compared each time)."""
        count = self._held.get(event_time)
        if count is None:
            self._held[event_time] = 1
            self._first[event_time] = now
            return
        self._held[event_time] = count + 1
        if now < self._first[event_time]:  # noqa: PLR1730 - a store only when earlier
            self._first[event_time] = now

    def note_watermark(self, parts: dict[str, PartitionState], silent: set[str]) -> None:
        """The topic's watermark, once every partition has a heartbeat or is known to carry
        none (`silent`: quiet without one): the smallest last heartbeat."""
        marks = [p.last_key for p in parts.values() if p.last_key is not None]
        waiting = [k for k, p in parts.items() if p.last_key is None and k not in silent]
        if marks and not waiting and (not self._watermarks or min(marks) > self._watermarks[-1]):
            self._watermarks.append(min(marks))
            del self._watermarks[:-MAX_WATERMARKS]

    def choice(self, parts: dict[str, PartitionState], max_rows: int) -> Choice:
        """Every held change at or below a watermark the topic passed: the earliest one that
        gives `max_rows` changes, else the latest."""
        if not self._watermarks:
            return Choice.NONE
        watermark = self._watermarks[-1]
        keys = sorted(self._held)
        totals = list(accumulate(map(self._held.__getitem__, keys)))
        for mark in self._watermarks:
            at = bisect.bisect_right(keys, mark)
            if at and totals[at - 1] >= max_rows:
                watermark = mark
                break
        below = bisect.bisect_right(keys, watermark)
        return Choice(
            totals[below - 1] if below else 0,
            min(map(self._first.__getitem__, keys[:below]), default=math.inf),
            watermark,
            lambda: [i for p in parts.values() for i in p.pending if i.change.cut_key <= watermark],
        )

    def forget(self, bound: Any) -> None:
        """A delta took every change at or below `bound`: its eventTimes are dropped whole,
        not counted down change by change, and so are the watermarks it passed."""
        for event_time in [t for t in self._held if t <= bound]:
            del self._held[event_time], self._first[event_time]
        self._watermarks = [w for w in self._watermarks if w > bound]
