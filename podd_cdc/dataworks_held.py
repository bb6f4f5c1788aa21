"""DataWorks changes held between two cuts, on arrays (step 2 of the columnar origin for
DataWorks, docs/cdc/internals.md): what `podd_cdc.cutter.Cutter` keeps a change at a time for
DataWorks (a `Pending` each, `EventTimes`, the identities held, each partition's last
heartbeat and the watermarks the topic passed), kept as a few arrays per batch fed.

A change is a line of `qlik_held.HeldChanges` (`podd_cdc.dataworks_feed`): where it was read,
its order as the exact decoder's (`sequenceId`, and 0 for an `UPDATE_BEFOR`, 1 else, as a
pair: `dataworks_feed.order_of`), its eventTime as its source time (`source_us`, µs), its
operation's code, when it arrived, its message's bytes, and where its row is. Its identity is
its order and operation (its id and operation): a change whose identity is held already is
a second copy, and so is one the last cut took by the membership rule (`taken_by`: at or
below its bound and read before its end). A change at or below the last bound read after it
is late: held, counted, and cut into the next delta.

The watermark is the smallest last heartbeat over the partitions that carry heartbeats, once
each partition has one or is known to carry none (`silent`); a delta takes every change held
at or below a watermark the topic passed: the earliest that gives `max_rows` changes, else
the latest (`EventTimes.choice`'s rule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence as Listed
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from podd_cdc.choose import MAX_WATERMARKS
from podd_cdc.cutlog import Cut, Span, after_last
from podd_cdc.identity_rows import IdentityRows
from podd_cdc.qlik_held import HeldChanges, HeldLines
from podd_cdc.values import millis_time


@dataclass(frozen=True)
class EventLook:
    """What a delta cut now would take: the watermark (ms; None: none passed), how many
    changes, when the first of them arrived, and their held lines, as fed."""

    watermark: int | None
    count: int
    oldest: float
    lines: Any


@dataclass(frozen=True)
class EventTaken:
    """What a take cut: the changes, per partition the `Span` the cut log records, and the
    delta's date (the watermark, after the last delta's)."""

    changes: HeldChanges
    spans: list[Span]
    date: datetime


class DataWorksHeld(HeldLines):
    def __init__(self, starts: Listed[int], last: Cut | None, spans: Listed[Span | None]) -> None:
        """`starts`, `spans`: as `HeldLines` takes them (DataWorks has no full-load rows:
        each span carries its partition's on as it was); `last`: the last cut."""
        super().__init__(starts, spans)
        self.last_bound: int | None = None if last is None else last.bound
        self.heartbeat: list[int | None] = [None] * len(starts)  # the last one read (ms)
        self.silent: set[int] = set()  # read to their end without a heartbeat
        self.watermarks: list[int] = []
        self._identities = IdentityRows(3)  # the held changes' (order pair, operation)
        self.late = 0

    def add_partition(self, offset: int) -> int:
        self.heartbeat.append(None)
        return super().add_partition(offset)

    def read_to(self, partition: int, offset: int) -> None:
        """Reading of `partition` moved on to `offset` past records that hold no change (a
        batch's markers may be fed after its changes)."""
        self.next_offset[partition] = max(self.next_offset[partition], offset)

    def beat(self, partition: int, event_ms: int, offset: int) -> None:
        """A heartbeat of `event_ms` read at `offset`: the partition's mark moves up to it,
        and the topic's watermark is noted again."""
        self.next_offset[partition] = max(self.next_offset[partition], offset + 1)
        before = self.heartbeat[partition]
        self.heartbeat[partition] = event_ms if before is None else max(before, event_ms)
        self.note_watermark()

    def hear_none(self, quiet: set[int]) -> None:
        """Partitions `quiet` (read to their end) without a heartbeat carry none: from now
        on they hold nothing back."""
        self.silent |= {p for p in quiet if self.heartbeat[p] is None}
        self.note_watermark()

    def note_watermark(self) -> None:
        """`EventTimes.note_watermark`: the smallest last heartbeat, once every partition
        has one or is silent, if it passed the last one noted."""
        marks = [mark for mark in self.heartbeat if mark is not None]
        waiting = any(
            mark is None and p not in self.silent for p, mark in enumerate(self.heartbeat)
        )
        if marks and not waiting and (not self.watermarks or min(marks) > self.watermarks[-1]):
            self.watermarks.append(min(marks))
            del self.watermarks[:-MAX_WATERMARKS]

    def feed(self, changes: HeldChanges) -> Any:
        """Hold `changes` (of one partition, in offset order) but second copies; returns
        which were held."""
        part = int(changes.partition[0]) if len(changes) else 0
        if (changes.partition != part).any():
            raise ValueError("a feed holds the changes of one partition")
        held = np.ones(len(changes), np.bool_)
        event_us = changes.source_us
        if self.last_bound is not None:
            below = event_us <= self.last_bound * 1000
            held &= ~(below & (changes.offset < self.prev_end[part]))  # the last cut took it
        candidates = np.nonzero(held)[0]
        high, low = (s[candidates] for s in changes.sequence)
        held[candidates] = self._identities.add_new([high, low, changes.operation[candidates]])
        if len(changes):  # a batch's heartbeats may be fed after its changes, or before
            self.next_offset[part] = max(self.next_offset[part], int(changes.offset[-1]) + 1)
        if self.last_bound is not None:
            self.late += int((changes.source_us[held] <= self.last_bound * 1000).sum())
        self._keep(changes, held)
        return held

    def ahead(self, quiet: set[int]) -> tuple[set[int], int | None]:
        """`Cutter.ahead` for DataWorks: the partitions (neither quiet nor silent) whose
        last heartbeat is above the smallest (all that have one, while one has none yet),
        and that heartbeat (None then)."""
        marks = {
            p: mark
            for p, mark in enumerate(self.heartbeat)
            if p not in quiet and p not in self.silent
        }
        if None in marks.values():
            return {p for p, mark in marks.items() if mark is not None}, None
        lowest = min((m for m in marks.values() if m is not None), default=None)
        return {p for p, mark in marks.items() if mark != lowest}, lowest

    def look(self, max_rows: int) -> EventLook:
        """`EventTimes.choice`: every change held at or below a watermark the topic passed,
        the earliest that gives `max_rows` changes, else the latest."""
        if not self.watermarks:
            return EventLook(None, 0, math.inf, np.zeros(0, np.int64))
        held = self.held()
        event_us = held.source_us
        watermark = self.watermarks[-1]
        if len(self.watermarks) > 1:
            marks = np.array(self.watermarks, np.int64) * 1000
            counts = np.searchsorted(np.sort(event_us), marks, side="right")
            enough = np.nonzero(counts >= max_rows)[0]
            if len(enough):
                watermark = self.watermarks[int(enough[0])]
        lines = np.nonzero(event_us <= watermark * 1000)[0]
        oldest = float(held.arrived[lines].min()) if len(lines) else math.inf
        return EventLook(watermark, len(lines), oldest, lines)

    def take(self, look: EventLook, last: Cut | None) -> EventTaken:
        """Cut what `look` found: its changes leave the held ones, the bound moves to its
        watermark, and each partition's span is recorded as `Cutter._take` records it."""
        if look.watermark is None:
            raise ValueError("no watermark to cut at")
        taken, lo = self._take_lines(look.lines)
        self._identities.discard([*taken.sequence, taken.operation])
        self.last_bound = look.watermark
        self.watermarks = [w for w in self.watermarks if w > look.watermark]
        next_lo = self._first_held(self.held())
        spans = [
            Span(lo[p], self.prev_end[p], self.next_offset[p], done, done, next_lo[p])
            for p, done in enumerate(self.refresh_done)
        ]
        self.prev_end = list(self.next_offset)
        date = after_last(millis_time(look.watermark).replace(tzinfo=UTC), last)
        return EventTaken(taken, spans, date)
