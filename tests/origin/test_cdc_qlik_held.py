"""Qlik changes held on arrays (`podd_cdc.qlik_held`) against the cutter (`Cutter.feed`,
`look`, `cut`): the same feeds, looks and cuts, in any order, hold the same changes, find
the same delta and take it, recording the same spans and date."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podd_cdc.cutlog import Cut, partition_key
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.qlik_held import NO_TIME, HeldChanges, QlikHeld
from podd_cdc.records import Change, Position
from tests.origin.test_cdc_cutter import SCHEMA
from tests.origin.test_cdc_qlik_transactions import _SEQUENCES, _pair, _text

WALL = datetime(2026, 1, 1, tzinfo=UTC)
PARTITIONS = 2  # at the start; one more may be added while reading (`add`)
MOST_PARTITIONS = PARTITIONS + 1

_change = st.tuples(
    st.one_of(st.sampled_from(_SEQUENCES), st.none()),  # None: a full-load (REFRESH) row
    st.sampled_from([None, 0, 1, 2]),  # a transaction's code
    st.one_of(st.none(), st.integers(0, 3)),
    st.booleans(),
    st.integers(0, 9).map(float),
    st.one_of(st.none(), st.integers(-3, 3)),  # its source time, seconds from WALL's
)
_partition = st.integers(0, MOST_PARTITIONS - 1)  # one not added yet is not read
_step = st.one_of(
    st.tuples(st.just("feed"), _partition, st.lists(_change, max_size=6)),
    # records that hold no change (metadata, dead letters): reading moves on
    st.tuples(st.just("pass"), _partition, st.integers(1, 3)),
    st.tuples(st.just("restart")),  # from the last cut: what it held is read again
    st.tuples(st.just("add"), st.integers(0, 5)),  # a partition appears, read from there
    st.tuples(st.sampled_from(["look", "cut"]), st.sets(_partition)),
)


def _source_time(seconds: int | None) -> datetime | None:
    return None if seconds is None else WALL.replace(tzinfo=None) + timedelta(seconds=seconds)


def _source_us(seconds: int | None) -> int:
    when = _source_time(seconds)
    return NO_TIME if when is None else (when - datetime(1970, 1, 1)) // timedelta(microseconds=1)


def _full_load(held: QlikHeld) -> int:
    return int(held.held().refresh.sum())


def _named(bound: tuple[int, int] | None) -> str | None:
    return None if bound is None else _text(bound[0] * 10**18 + bound[1])


class Both:
    """One cutter and one holder, fed alike."""

    def __init__(
        self, max_rows: int, last: Cut | None = None, partitions: int = PARTITIONS
    ) -> None:
        """Both start where `last` left the partitions (at offset 0 without one)."""
        keys = [partition_key("q", p) for p in range(partitions)]
        spans = [last.spans.get(key) if last else None for key in keys]
        starts = [span.next_lo if span else 0 for span in spans]
        bounds = Bounds(max_rows)
        self.cutter = Cutter("qlik", SCHEMA, dict(zip(keys, starts, strict=True)), last, bounds)
        self.held = QlikHeld(starts, _pair(last.bound) if last and last.bound else None, spans)
        self.max_rows = max_rows
        self.offsets = list(starts)
        self.delta = last.delta + 1 if last else 0
        self.last = last

    @property
    def partitions(self) -> int:
        return len(self.offsets)

    def add(self, offset: int) -> None:
        if self.partitions == MOST_PARTITIONS:
            return
        self.cutter.add_partition(partition_key("q", self.partitions), offset)
        assert self.held.add_partition(offset) == self.partitions
        self.offsets.append(offset)

    def feed(self, partition: int, drawn: list[tuple[Any, ...]]) -> None:
        if partition >= self.partitions:
            return
        key = partition_key("q", partition)
        first = self.offsets[partition]
        drawn = [d if d[0] is not None else (None, None, None, False, d[4], None) for d in drawn]
        for k, (value, code, counter, last, arrived, seconds) in enumerate(drawn):
            if value is None:
                change = Change((), None, ("",), None)
            else:
                text = _text(value)
                transaction = None if code is None else f"t{code}"
                when = _source_time(seconds)
                change = Change((), text, (text,), (text,), when, transaction, counter, last)
            self.cutter.feed(Position("q", partition, first + k), change, arrived, 1, key)
        self.offsets[partition] += len(drawn)
        pairs = [(0, 0) if d[0] is None else _pair(_text(d[0])) for d in drawn]
        changes = HeldChanges(
            np.full(len(drawn), partition, np.int64),
            np.arange(first, first + len(drawn), dtype=np.int64),
            (np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)),
            np.array([-1 if d[1] is None else d[1] for d in drawn], np.int64),
            np.array([d[2] or 0 for d in drawn], np.int64),
            np.array([d[3] for d in drawn], np.bool_),
            np.array([d[4] for d in drawn], np.float64),
            np.ones(len(drawn), np.int64),
            np.array([d[0] is None for d in drawn], np.bool_),
            np.array([_source_us(d[5]) for d in drawn], np.int64),
            np.zeros(len(drawn), np.int64),
            np.arange(first, first + len(drawn), dtype=np.int64),
            np.zeros(len(drawn), np.int64),
        )
        self.held.feed(changes)
        assert (self.held.pending, self.held.duplicates) == (
            self.cutter.pending,
            self.cutter.duplicates,
        )
        assert _named(self.held.newest[partition]) == self.cutter.parts[key].last_key
        assert self.held.identities_kept == self.held.pending - _full_load(self.held)

    def passed(self, partition: int, count: int) -> None:
        if partition >= self.partitions:
            return
        for _ in range(count):
            self.cutter.passed(Position("q", partition, self.offsets[partition]))
            self.offsets[partition] += 1
        self.held.read_to(partition, self.offsets[partition])

    def look(self, quiet: set[int]) -> None:
        quiet = {p for p in quiet if p < self.partitions}
        keys = {partition_key("q", p) for p in quiet}
        ahead, lowest = self.held.ahead(quiet)
        assert ({partition_key("q", p) for p in ahead}, _named(lowest)) == self.cutter.ahead(keys)
        oldest = self.cutter.oldest_open()
        first = self.held.first_held()
        assert (min(first.items()) if first else None) == (
            None if oldest is None else (oldest.partition, oldest.offset)
        )
        waited = [p.pending[0].arrived for p in self.cutter.parts.values() if p.pending]
        assert self.held.oldest_arrival() == min(waited, default=None)  # `Cutter.cut`'s oldest
        expected = self.cutter.look(keys)
        look = self.held.look(quiet, self.max_rows)
        held = self.held.held()
        lines = look.lines.tolist()
        found = list(zip(held.partition[lines].tolist(), held.offset[lines].tolist(), strict=True))
        assert found == [(i.at.partition, i.at.offset) for i in expected.items()]
        assert look.count == expected.count
        if expected.count:
            assert look.oldest == expected.oldest
        assert _named(look.bound) == expected.bound

    def cut(self, quiet: set[int]) -> None:
        quiet = {p for p in quiet if p < self.partitions}
        self.look(quiet)
        keys = {partition_key("q", p) for p in quiet}
        made = self.cutter.cut(self.delta, keys, 0.0, WALL, force=True)
        look = self.held.look(quiet, self.max_rows)
        if made is None:
            assert look.count == 0
            return
        cut, _ = made
        found = self.held.take(look)
        taken = found.changes
        assert found.spans == [cut.spans[partition_key("q", p)] for p in range(self.partitions)]
        assert found.date(self.last, WALL) == cut.date
        self.last = cut
        assert _named(self.held.last_bound) == cut.bound
        assert len(taken) == cut.changes
        assert taken.line.tolist() == taken.offset.tolist()  # (each change's row goes with it)
        assert self.held.pending == self.cutter.pending
        assert self.held.identities_kept == self.held.pending - _full_load(self.held)
        assert self.held.refresh_done == [
            self.cutter.parts[partition_key("q", p)].refresh_done for p in range(self.partitions)
        ]
        self.delta += 1


@settings(max_examples=400, deadline=None)
@given(st.lists(_step, max_size=12), st.integers(1, 6))
def test_feeds_looks_and_cuts_agree_with_the_cutter(steps: list[Any], max_rows: int) -> None:
    both = Both(max_rows)
    for step in steps:
        if step[0] == "feed":
            both.feed(step[1], step[2])
        elif step[0] == "pass":
            both.passed(step[1], step[2])
        elif step[0] == "restart":
            both = Both(max_rows, both.last, both.partitions)
        elif step[0] == "add":
            both.add(step[1])
        elif step[0] == "look":
            both.look(step[1])
        else:
            both.cut(step[1])
    both.cut(set(range(MOST_PARTITIONS)))


def test_a_feed_of_two_partitions_is_refused() -> None:
    """Each partition's newest sequence is kept from its own feeds: a feed mixing two
    would move one partition's bound by the other's changes."""
    two = np.array([0, 1], np.int64)
    changes = HeldChanges(
        two, two, (two, two), two - 2, two, two > 0, two * 0.0, two, two < 0, two, two, two, two
    )
    with pytest.raises(ValueError, match="one partition"):
        QlikHeld([0, 0]).feed(changes)


def test_a_restart_after_a_cut_that_left_changes_held_spans_from_the_cuts_end() -> None:
    """A cut that leaves an open transaction held ends reading past where the next delta
    starts (`next_lo` < `end`); started again from it, the next cut's span still begins
    where that cut ended (`prev_end`), as the cutter's does."""
    both = Both(10)
    first, second, third = sorted(_SEQUENCES)[:3]
    both.feed(0, [(first, None, None, False, 0.0, 0), (second, 0, 1, False, 0.0, 1)])
    both.cut({0, 1})
    assert both.last is not None
    span = both.last.spans[partition_key("q", 0)]
    assert (span.next_lo, span.end) == (1, 2)
    both = Both(10, both.last)
    both.feed(0, [(second, 0, 1, True, 0.0, 1), (third, None, None, False, 0.0, 2)])
    both.cut({0, 1})
    assert both.last is not None
    assert both.last.spans[partition_key("q", 0)].prev_end == 2


def test_a_partition_read_past_the_bound_is_ahead_and_a_new_one_holds_it_back() -> None:
    """Partition 1 read further than partition 0 is ahead of the bound partition 0 holds;
    a partition added while reading, with nothing read yet, holds it back most: every
    partition that has a sequence is then ahead. Both as the cutter says."""
    both = Both(10)
    first, second = sorted(_SEQUENCES)[1:3]
    both.feed(0, [(first, None, None, False, 0.0, 0)])
    both.feed(1, [(second, None, None, False, 0.0, 0)])
    assert both.held.ahead(set()) == ({1}, _pair(_text(first)))
    both.look(set())
    both.add(4)
    assert both.held.ahead(set()) == ({0, 1}, None)
    both.look(set())
    assert both.held.first_held() == {0: 0, 1: 0}
