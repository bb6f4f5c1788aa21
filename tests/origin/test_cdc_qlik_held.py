"""Qlik changes held on arrays (`podd_cdc.qlik_held`) against the cutter (`Cutter.feed`,
`look`, `cut`): the same feeds, looks and cuts, in any order, hold the same changes, find
the same delta and take it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podd_cdc.cutlog import partition_key
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.qlik_held import HeldChanges, QlikHeld
from podd_cdc.records import Change, Position
from tests.origin.test_cdc_cutter import SCHEMA
from tests.origin.test_cdc_qlik_transactions import _SEQUENCES, _pair, _text

WALL = datetime(2026, 1, 1, tzinfo=UTC)
PARTITIONS = 2

_change = st.tuples(
    st.one_of(st.sampled_from(_SEQUENCES), st.none()),  # None: a full-load (REFRESH) row
    st.sampled_from([None, 0, 1, 2]),  # a transaction's code
    st.one_of(st.none(), st.integers(0, 3)),
    st.booleans(),
    st.integers(0, 9).map(float),
)
_step = st.one_of(
    st.tuples(st.just("feed"), st.integers(0, PARTITIONS - 1), st.lists(_change, max_size=6)),
    st.tuples(st.sampled_from(["look", "cut"]), st.sets(st.integers(0, PARTITIONS - 1))),
)


def _full_load(held: QlikHeld) -> int:
    return int(held.held().refresh.sum())


def _named(bound: tuple[int, int] | None) -> str | None:
    return None if bound is None else _text(bound[0] * 10**18 + bound[1])


class Both:
    """One cutter and one holder, fed alike."""

    def __init__(self, max_rows: int) -> None:
        keys = [partition_key("q", p) for p in range(PARTITIONS)]
        self.cutter = Cutter("qlik", SCHEMA, dict.fromkeys(keys, 0), None, Bounds(max_rows))
        self.held = QlikHeld([0] * PARTITIONS)
        self.max_rows = max_rows
        self.offsets = [0] * PARTITIONS
        self.delta = 0

    def feed(self, partition: int, drawn: list[tuple[Any, ...]]) -> None:
        key = partition_key("q", partition)
        first = self.offsets[partition]
        drawn = [d if d[0] is not None else (None, None, None, False, d[4]) for d in drawn]
        for k, (value, code, counter, last, arrived) in enumerate(drawn):
            if value is None:
                change = Change((), None, ("",), None)
            else:
                text = _text(value)
                transaction = None if code is None else f"t{code}"
                change = Change((), text, (text,), (text,), None, transaction, counter, last)
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
            np.zeros(len(drawn), np.int64),
            np.arange(first, first + len(drawn), dtype=np.int64),
        )
        self.held.feed(changes)
        assert (self.held.pending, self.held.duplicates) == (
            self.cutter.pending,
            self.cutter.duplicates,
        )
        assert _named(self.held.newest[partition]) == self.cutter.parts[key].last_key
        assert self.held.identities_kept == self.held.pending - _full_load(self.held)

    def look(self, quiet: set[int]) -> None:
        expected = self.cutter.look({partition_key("q", p) for p in quiet})
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
        self.look(quiet)
        keys = {partition_key("q", p) for p in quiet}
        made = self.cutter.cut(self.delta, keys, 0.0, WALL, force=True)
        look = self.held.look(quiet, self.max_rows)
        if made is None:
            assert look.count == 0
            return
        cut, _ = made
        taken = self.held.take(look)
        assert _named(self.held.last_bound) == cut.bound
        assert len(taken) == cut.changes
        assert taken.line.tolist() == taken.offset.tolist()  # (each change's row goes with it)
        assert self.held.pending == self.cutter.pending
        assert self.held.identities_kept == self.held.pending - _full_load(self.held)
        assert self.held.refresh_done == [
            self.cutter.parts[partition_key("q", p)].refresh_done for p in range(PARTITIONS)
        ]
        self.delta += 1


@settings(max_examples=400, deadline=None)
@given(st.lists(_step, max_size=12), st.integers(1, 6))
def test_feeds_looks_and_cuts_agree_with_the_cutter(steps: list[Any], max_rows: int) -> None:
    both = Both(max_rows)
    for step in steps:
        if step[0] == "feed":
            both.feed(step[1], step[2])
        elif step[0] == "look":
            both.look(step[1])
        else:
            both.cut(step[1])
    both.cut(set(range(PARTITIONS)))


def test_a_feed_of_two_partitions_is_refused() -> None:
    """Each partition's newest sequence is kept from its own feeds: a feed mixing two
    would move one partition's bound by the other's changes."""
    two = np.array([0, 1], np.int64)
    changes = HeldChanges(
        two, two, (two, two), two - 2, two, two > 0, two * 0.0, two, two < 0, two, two
    )
    with pytest.raises(ValueError, match="one partition"):
        QlikHeld([0, 0]).feed(changes)
