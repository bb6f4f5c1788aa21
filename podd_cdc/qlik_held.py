"""Qlik changes held between two cuts, on arrays (step 2 of the columnar origin,
docs/cdc/internals.md): what `podd_cdc.cutter.Cutter` keeps a change at a time for Qlik
(a `Pending`, its `Group`, the identities held, each partition's newest sequence), kept as
a few arrays per batch fed, with the look and the take of `podd_cdc.qlik_transactions`.

A change is named by where it was read (partition, offset) and carries its sequence as the
pair step 1 reads (`podd_cdc.qlik_batch_changes`), its transaction as a code (-1: none;
the same id, the same code, from the caller), its counter (0: none), its last-event flag,
when it arrived and its message's bytes. Its identity is its sequence: a change whose
sequence is held already, or at or below the last cut's bound, is a second copy, as
`Cutter.feed` decides (`membership.taken_by`). A full-load (REFRESH) row has no sequence
(`refresh`): it is a copy if read below where the full-load rows cut so far end in its
partition, and goes with the changes after it (`podd_cdc.choose`).

It also keeps where each partition's reading stands, as `PartitionState` does, so that a
take records the `Span`s `Cutter._take` records, and the delta's date (`Taken.date`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence as Listed
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

import numpy as np

from podd_cdc.choose import lowest_newest
from podd_cdc.cutlog import Cut, Span, after_last
from podd_cdc.identity_rows import IdentityRows
from podd_cdc.qlik_headers import SEQUENCE_WIDTH
from podd_cdc.qlik_transactions import Sequence, choose, transactions_of
from podd_cdc.small_order import stable_order
from podd_cdc.values import micros_time

_SPLIT = 10**18  # a sequence's last 18 digits
#: `source_us` of a change without a source time (a full-load row, or no `timestamp`).
NO_TIME = np.iinfo(np.int64).min


def _identity(high: int, low: int) -> int:
    """A sequence's pair as one number, ordered as the sequences are."""
    return high * _SPLIT + low


def identity_of(sequence: Sequence) -> int:
    """A sequence's pair as the one number `QlikHeld` knows a change by."""
    return _identity(*sequence)


def sequence_of_key(key: str | None) -> Sequence:
    """A decoder's sequence key (`qlik_headers.sequence_key`) as its pair; (0, 0), below
    every sequence, for a full-load row's none."""
    value = 0 if key is None else int(key)
    return value // _SPLIT, value % _SPLIT


def sequence_key_of(sequence: Sequence) -> str:
    """A sequence's pair as the key the exact decoder makes of it (`qlik_headers.sequence_key`),
    as the cut log records a bound."""
    return str(_identity(*sequence)).rjust(SEQUENCE_WIDTH, "0")


@dataclass(frozen=True)
class HeldChanges:
    """Changes held, a line each, in the order they were fed."""

    partition: Any
    offset: Any
    sequence: tuple[Any, Any]
    transaction: Any
    counter: Any
    last: Any
    arrived: Any
    size: Any
    refresh: Any  # a full-load row: no sequence, no transaction
    source_us: Any  # its source time, µs since 1970 (`NO_TIME`: none)
    block: Any  # where its row is: the block of columns the caller keeps it in
    line: Any  # ... and its line there
    #: Its operation's code, where the format's identity needs it (a DataWorks change is the
    #: same change only with the same id and operation: `podd_cdc.dataworks_held`); 0 else.
    operation: Any

    def __len__(self) -> int:
        return len(self.offset)

    def __getitem__(self, which: Any) -> HeldChanges:
        return _each([self], lambda arrays: arrays[0][which])

    @staticmethod
    def joined(parts: list[HeldChanges]) -> HeldChanges:
        return _each(parts, np.concatenate)


def _each(parts: list[HeldChanges], make: Any) -> HeldChanges:
    """Held changes whose every array is `make` of that array in each of `parts` (the
    sequence pair's two arrays each on their own)."""
    arrays = {}
    for name in _FIELDS:
        of_parts = [getattr(part, name) for part in parts]
        if name == "sequence":
            arrays[name] = (make([s[0] for s in of_parts]), make([s[1] for s in of_parts]))
        else:
            arrays[name] = make(of_parts)
    return HeldChanges(**arrays)


_FIELDS = [f.name for f in fields(HeldChanges)]


@dataclass(frozen=True)
class Look:
    """What a delta cut now would take: the bound, how many changes, when the first of
    them arrived, and their held lines, in the delta's order (by transaction taken, then
    as fed; then the full-load rows, by partition, as fed)."""

    bound: Sequence | None
    count: int
    oldest: float
    lines: Any


@dataclass(frozen=True)
class Taken:
    """What a take cut: the changes, and per partition the `Span` the cut log records."""

    changes: HeldChanges
    spans: list[Span]

    def date(self, last: Cut | None, wall: datetime) -> datetime:
        """The delta's date, as `Cutter` dates a Qlik delta: its newest source time (`wall`
        where none has one), after the last delta's (`cutlog.after_last`)."""
        times = self.changes.source_us[self.changes.source_us != NO_TIME]
        if not len(times):
            return after_last(wall, last)
        newest = micros_time(int(times.max()))
        return after_last(newest.replace(tzinfo=UTC), last)


class HeldLines:
    """What either format's changes held on arrays keep alike (`QlikHeld`,
    `dataworks_held.DataWorksHeld`): where each partition's reading stands and stood at the
    last cut, the lines held as fed, when each partition's first one arrived, and the
    counts."""

    def __init__(self, starts: Listed[int], spans: Listed[Span | None] | None = None) -> None:
        """`starts`: per partition, its first offset to read; `spans`: the last cut's
        (None where it recorded none), from which a partition's last cut ended and where
        its full-load rows cut so far end (`Span.end`, `Span.refresh_upto`)."""
        last = list(spans) if spans is not None else [None] * len(starts)
        self.next_offset = list(starts)  # the next offset to read: reading stands there
        self.prev_end = [s.end if s else at for s, at in zip(last, starts, strict=True)]
        self.refresh_done = [
            s.refresh_upto if s else at for s, at in zip(last, starts, strict=True)
        ]
        self._parts: list[HeldChanges] = []
        #: Per partition that holds a change, when its first change held arrived.
        self._first_arrival: dict[int, float] = {}
        self.pending = 0
        self.pending_bytes = 0
        self.duplicates = 0

    def add_partition(self, offset: int) -> int:
        """A partition that appeared while the run reads, read from `offset`; its number."""
        self.next_offset.append(offset)
        self.prev_end.append(offset)
        self.refresh_done.append(offset)
        return len(self.next_offset) - 1

    def _keep(self, changes: HeldChanges, held: Any) -> None:
        """Of a feed of one partition's `changes`, hold those `held` (the rest were copies)."""
        kept = changes[held]
        self._parts.append(kept)
        if len(kept):
            self._first_arrival.setdefault(int(kept.partition[0]), float(kept.arrived[0]))
        self.pending += len(kept)
        self.pending_bytes += int(kept.size.sum())
        self.duplicates += int(len(held) - len(kept))

    def _take_lines(self, lines: Any) -> tuple[HeldChanges, list[int]]:
        """Lines `lines` of what is held taken from it: the changes, and per partition the
        first offset of a change held before (a span's `lo`)."""
        held = self.held()
        lo = self._first_held(held)
        taken = held[lines]
        left = np.ones(len(held), np.bool_)
        left[lines] = False
        rest = held[left]
        self._parts = [rest]
        parts, first = np.unique(rest.partition, return_index=True)
        self._first_arrival = dict(zip(parts.tolist(), rest.arrived[first].tolist(), strict=True))
        self.pending -= len(taken)
        self.pending_bytes -= int(taken.size.sum())
        return taken, lo

    def held(self) -> HeldChanges:
        """Every change held, as fed."""
        if len(self._parts) != 1:
            self._parts = [HeldChanges.joined(self._parts)] if self._parts else []
        return self._parts[0] if self._parts else _NONE

    def first_held(self) -> dict[int, int]:
        """Per partition that holds a change, the offset of its first (where the oldest
        change still held was read: `Cutter.oldest_open`)."""
        held = self.held()
        first = self._first_held(held)
        return {int(p): first[int(p)] for p in np.unique(held.partition).tolist()}

    def oldest_arrival(self) -> float | None:
        """When the first change held of each partition arrived, the earliest (None: none
        held); `Cutter.cut`'s oldest change, kept as changes are fed and taken."""
        return min(self._first_arrival.values(), default=None)

    def _first_held(self, held: HeldChanges) -> list[int]:
        """Per partition, the first offset of a change held, or where reading stands."""
        first = np.array(self.next_offset, np.int64)
        np.minimum.at(first, held.partition, held.offset)
        return [int(at) for at in first]


class QlikHeld(HeldLines):
    def __init__(
        self,
        starts: Listed[int],
        last_bound: Sequence | None = None,
        spans: Listed[Span | None] | None = None,
    ) -> None:
        """`starts`, `spans`: as `HeldLines` takes them; `last_bound`: the last cut's."""
        super().__init__(starts, spans)
        self.last_bound = last_bound
        self.newest: list[Sequence | None] = [None] * len(starts)
        self._identities = IdentityRows(2)  # the held changes' sequences

    def feed(self, changes: HeldChanges) -> Any:
        """Hold `changes` (of one partition, in offset order) but second copies; returns
        which were held."""
        refresh = changes.refresh
        part = int(changes.partition[0]) if len(changes) else 0
        if (changes.partition != part).any():
            raise ValueError("a feed holds the changes of one partition")
        cdc = np.nonzero(~refresh)[0]
        high, low = changes.sequence[0][cdc], changes.sequence[1][cdc]
        if len(cdc):
            top = int(np.lexsort((low, high))[-1])
            newest, before = (int(high[top]), int(low[top])), self.newest[part]
            if before is None or newest > before:
                self.newest[part] = newest
        held = refresh & (changes.offset >= self.refresh_done[part])
        if self.last_bound is not None:  # at or below the last cut's bound: a copy
            bound_high, bound_low = self.last_bound
            above = (high > bound_high) | ((high == bound_high) & (low > bound_low))
            cdc, high, low = cdc[above], high[above], low[above]
        held[cdc[self._identities.add_new([high, low])]] = True
        if len(changes):
            self.next_offset[part] = int(changes.offset[-1]) + 1
        self._keep(changes, held)
        return held

    def read_to(self, partition: int, offset: int) -> None:
        """Reading of `partition` moved on to `offset` past records that hold no change (a
        table's metadata, a message sent to the dead-letter topic)."""
        self.next_offset[partition] = offset

    def add_partition(self, offset: int) -> int:
        self.newest.append(None)
        return super().add_partition(offset)

    def ahead(self, quiet: set[int]) -> tuple[set[int], Sequence | None]:
        """`Cutter.ahead` for Qlik: the partitions (neither quiet) read further than one
        that holds the bound back (the smallest newest sequence; one with none yet holds
        it back most), and that sequence (None then)."""
        newest = {p: n for p, n in enumerate(self.newest) if p not in quiet}
        if None in newest.values():
            return {p for p, n in newest.items() if n is not None}, None
        lowest = min((n for n in newest.values() if n is not None), default=None)
        return {p for p, n in newest.items() if n != lowest}, lowest

    def holds(self, sequence: Sequence) -> bool:
        """Whether a change of `sequence` is held (a copy of it would be a duplicate)."""
        return tuple(sequence) in self._identities

    @property
    def identities_kept(self) -> int:
        """Identities remembered: only the held changes' (a taken change's copy is below
        the bound), so this is bounded as what is held is."""
        return len(self._identities)

    def look(self, quiet: set[int], max_rows: int) -> Look:
        """What `Cutter.look` would choose: partitions `quiet` are read to their end."""
        held = self.held()
        bound, everything = lowest_newest([n for p, n in enumerate(self.newest) if p not in quiet])
        cdc = np.nonzero(~held.refresh)[0]
        of = held if len(cdc) == len(held) else held[cdc]
        group = _groups(of.transaction)
        transactions = transactions_of(
            group, of.sequence, of.counter, of.last, of.transaction >= 0, of.arrived
        )
        taken = choose(transactions, bound, everything, self.last_bound, max_rows)
        place = np.full(len(transactions.count), -1, np.int64)
        place[taken.transactions] = np.arange(len(taken.transactions))
        where = place[group]
        chosen = np.nonzero(where >= 0)[0]
        lines = cdc[chosen[np.argsort(where[chosen], kind="stable")]]
        if len(cdc) == len(held):
            return Look(taken.bound, taken.count, taken.oldest, lines)
        lines = np.concatenate([lines, self._full_load(held, lines, quiet)])
        oldest = float(held.arrived[lines].min()) if len(lines) else math.inf
        return Look(taken.bound, len(lines), oldest, lines)

    def _full_load(self, held: HeldChanges, chosen: Any, quiet: set[int]) -> Any:
        """The full-load rows that go with `chosen`: read before a change chosen in their
        partition, or in a quiet partition that holds no other change (`choose`)."""
        partitions = len(self.newest)
        reach = np.full(partitions, -1, np.int64)
        np.maximum.at(reach, held.partition[chosen], held.offset[chosen])
        others = ~held.refresh
        others[chosen] = False
        busy = np.zeros(partitions, np.bool_)
        busy[held.partition[others]] = True
        idle = np.isin(np.arange(partitions), list(quiet)) & ~busy
        rows = np.nonzero(held.refresh)[0]
        part = held.partition[rows]
        rows = rows[(held.offset[rows] < reach[part]) | idle[part]]
        return rows[stable_order(held.partition[rows], partitions - 1)]

    def take(self, look: Look) -> Taken:
        """Cut what `look` found: its changes leave the held ones, the bound moves, and each
        partition's span is recorded as `Cutter._take` records it."""
        refresh_from = list(self.refresh_done)
        taken, lo = self._take_lines(look.lines)
        cdc, full_load = taken[~taken.refresh], taken[taken.refresh]
        self._identities.discard(cdc.sequence)
        for part, at in zip(full_load.partition.tolist(), full_load.offset.tolist(), strict=True):
            self.refresh_done[part] = max(self.refresh_done[part], at + 1)
        self.last_bound = look.bound
        next_lo = self._first_held(self._parts[0])
        spans = [
            Span(lo[p], self.prev_end[p], self.next_offset[p], refresh_from[p], upto, next_lo[p])
            for p, upto in enumerate(self.refresh_done)
        ]
        self.prev_end = list(self.next_offset)
        return Taken(taken, spans)


def _groups(transaction: Any) -> Any:
    """Each change's transaction numbered 0..g-1 in the order each was first fed; a change
    outside a transaction is one of its own."""
    own = -np.arange(1, len(transaction) + 1, dtype=np.int64)
    keys = np.where(transaction >= 0, transaction, own)
    _, first, which = np.unique(keys, return_index=True, return_inverse=True)
    numbered = np.empty(len(first), np.int64)
    numbered[np.argsort(first)] = np.arange(len(first))
    return numbered[which.reshape(-1)]


_EMPTY = np.zeros(0, np.int64)
_KINDS = {"last": np.bool_, "refresh": np.bool_, "arrived": np.float64}  # else int64
_NONE_ARRAYS: dict[str, Any] = {name: np.zeros(0, _KINDS.get(name, np.int64)) for name in _FIELDS}
_NONE = HeldChanges(**{**_NONE_ARRAYS, "sequence": (_EMPTY, _EMPTY)})
