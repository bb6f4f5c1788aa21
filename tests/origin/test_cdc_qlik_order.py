"""The order check on arrays (`podd_cdc.qlik_order.first_to_judge`) never lets a change
the exact check (`Cutter.check`) would stop pass as a batch: where the exact check stops,
the arrays send the caller to it at that change or before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from podd_cdc.cutlog import partition_key
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.errors import SequenceStop
from podd_cdc.qlik_order import first_to_judge, order_limits
from podd_cdc.records import Change, Position
from tests.origin.test_cdc_cutter import SCHEMA

T0, EPOCH = datetime(2026, 1, 1), datetime(1970, 1, 1)
AHEAD, REGRESS = timedelta(hours=1), timedelta(seconds=60)
KEY = partition_key("q", 0)

#: (seconds after T0 of its sequence's time, or None for a full-load row; its last 19
#: digits; seconds after T0 of its source time, or None)
_change = st.tuples(
    st.one_of(st.none(), st.integers(-300, 7300)),
    st.integers(0, 3),
    st.one_of(st.none(), st.integers(-300, 7300)),
    st.sampled_from(["00", "50", "99"]),  # the sequence time's hundredths
)


def _sequence(seconds: int, tail: int, hundredths: str = "00") -> str:
    when = T0 + timedelta(seconds=seconds)
    return (when.strftime("%Y%m%d%H%M%S") + hundredths + f"{tail:019d}").rjust(40, "0")


def _pair(key: str | None) -> tuple[int, int] | None:
    if key is None:
        return None
    return int(key[-35:-18]), int(key[-18:])


def _change_of(drawn: tuple[Any, ...]) -> Change:
    seconds, tail, source, hundredths = drawn
    if seconds is None:
        return Change((), None, ("",), None)
    key = _sequence(seconds, tail, hundredths)
    when = None if source is None else T0 + timedelta(seconds=source)
    return Change((), key, (key,), (key,), when)


def _exact_stop(cutter: Cutter, changes: list[Change], first: int, wall: datetime) -> int | None:
    """Where the exact check stops the batch (None: nowhere), checking and feeding each."""
    for k, change in enumerate(changes):
        at = Position("q", 0, first + k)
        try:
            cutter.check(at, change, wall, KEY)
        except SequenceStop:
            return k
        cutter.feed(at, change, 0.0, 1, KEY)
    return None


@settings(max_examples=500, deadline=None)
@given(
    st.lists(_change, max_size=8),
    st.booleans(),
    st.lists(_change, min_size=1, max_size=8),
    st.integers(0, 7200),
)
def test_no_change_the_exact_check_stops_passes_as_a_batch(
    before: list[Any], cut: bool, batch: list[Any], wall_seconds: int
) -> None:
    wall = (T0 + timedelta(seconds=wall_seconds)).replace(tzinfo=UTC)
    bounds = Bounds(max_ahead=AHEAD.total_seconds(), max_regress=REGRESS.total_seconds())
    cutter = Cutter("qlik", SCHEMA, {KEY: 0}, None, bounds)
    earlier = [_change_of(d) for d in before]
    fed = _exact_stop(cutter, earlier, 0, wall)
    fed = len(earlier) if fed is None else fed
    if cut:
        cutter.cut(0, {KEY}, 0.0, wall, force=True)
    changes = [_change_of(d) for d in batch]
    pairs = [_pair(c.cut_key) or (0, 0) for c in changes]
    source = [c.source_time for c in changes]
    first = first_to_judge(
        (np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)),
        np.array([c.cut_key is None for c in changes], np.bool_),
        np.array([0 if s is None else (s - EPOCH) // timedelta(microseconds=1) for s in source]),
        np.array([s is not None for s in source], np.bool_),
        _pair(cutter.parts[KEY].last_key),
        _pair(cutter.last.bound if cutter.last is not None else None),
        order_limits(wall, AHEAD),
    )
    stop = _exact_stop(cutter, changes, fed, wall)
    if stop is not None:
        assert first <= stop


def test_changes_in_order_after_the_bound_pass_as_a_batch() -> None:
    """And the check is of use: a batch in order, above the bound and behind the clock,
    passes whole; one step back, one ahead, one at the bound each send it to the exact
    check there."""
    wall = (T0 + timedelta(hours=2)).replace(tzinfo=UTC)
    limits = order_limits(wall, AHEAD)
    keys = [_sequence(s, 0) for s in (10, 20, 30, 40)]

    def first(keys: list[str], newest: str | None = None, bound: str | None = None) -> int:
        pairs = [_pair(k) or (0, 0) for k in keys]
        return first_to_judge(
            (np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])),
            np.zeros(len(keys), np.bool_),
            np.zeros(len(keys), np.int64),
            np.zeros(len(keys), np.bool_),
            _pair(newest),
            _pair(bound),
            limits,
        )

    assert first(keys, newest=_sequence(5, 0), bound=_sequence(5, 0)) == 4
    assert first([keys[0], keys[2], keys[1], keys[3]]) == 2
    assert first([*keys[:3], _sequence(4 * 3600, 0)]) == 3
    assert first(keys, bound=keys[1]) == 0
    assert first(keys[1:], bound=keys[1]) == 0  # at the bound itself: a copy, or a stop
    assert first(keys[2:], newest=keys[3]) == 0


def test_the_clocks_edges_and_full_load_rows() -> None:
    """Exactly at the latest time a sequence or a source time may carry passes; a
    hundredth (a microsecond) later goes to the exact check. A full-load row's pair is
    never looked at, whatever it holds."""
    wall = (T0 + timedelta(hours=2)).replace(tzinfo=UTC)
    limits = order_limits(wall, AHEAD)
    latest = T0 + timedelta(hours=3)
    last_second = latest.strftime("%Y%m%d%H%M%S")
    at_limit = int(last_second + "99" + "0")  # the first 17 digits
    past = int((latest + timedelta(seconds=1)).strftime("%Y%m%d%H%M%S") + "00" + "0")
    limit_us = (latest - EPOCH) // timedelta(microseconds=1)

    def first(highs: list[int], source: list[int | None], refresh: list[bool]) -> int:
        return first_to_judge(
            (np.array(highs, np.int64), np.zeros(len(highs), np.int64)),
            np.array(refresh, np.bool_),
            np.array([s or 0 for s in source], np.int64),
            np.array([s is not None for s in source], np.bool_),
            None,
            None,
            limits,
        )

    base = int(T0.strftime("%Y%m%d%H%M%S") + "00" + "0")
    assert first([base, at_limit], [None, limit_us], [False, False]) == 2
    assert first([base, past], [None, None], [False, False]) == 1
    assert first([base, base + 10], [None, limit_us + 1], [False, False]) == 1
    # a full-load row's pair, larger than the next change's, and ahead: not looked at
    assert first([past, base], [limit_us + 1, None], [True, False]) == 2
