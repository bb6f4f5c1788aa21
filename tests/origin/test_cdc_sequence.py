"""Sequence integrity (docs/contracts/CDC.md, "Sequence integrity"), on records made by hand: a
change that breaks the source's order stops the run naming where it was read, never a silent drop
or an out-of-order apply; copies still count as duplicates. Pure: no Kafka, time passed in.

Before, the Qlik cut treated every change at or below the last bound as a copy: a sequence
that went backwards (150 transactions 400 days earlier, after a clock change) was swallowed,
and one sequence of 40 nines set the bound past every change still to come."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from podd_cdc.cutlog import Cut
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.errors import BadInput, SequenceStop
from podd_cdc.membership import Format
from podd_cdc.qlik_headers import sequence_key, source_time
from podd_cdc.records import Change, Heartbeat, Position, Record, RowChange
from podd_cdc.sequence_guard import MAX_TAKEN, SequenceGuard
from tests.origin.test_cdc_cutter import P0, P1, SCHEMA, WALL, dw

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def seq(when: datetime, number: int) -> str:
    """A Qlik `changeSequence` of `when` and change number `number`, as a sort key."""
    return sequence_key(
        when.strftime("%Y%m%d%H%M%S") + f"{when.microsecond // 10_000:02d}" + f"{number:019d}"
    )


def change(when: datetime, number: int, key: int) -> Change:
    s = seq(when, number)
    return Change((RowChange("t", 0, (key, "v")),), s, (s,), (s,), when.replace(tzinfo=None))


class Checked:
    """A cutter fed as the intake feeds it: each record checked first."""

    def __init__(
        self,
        fmt: Format = "qlik",
        last: Cut | None = None,
        starts: dict[str, int] | None = None,
        **bounds: Any,
    ) -> None:
        self.starts = dict(starts or {P0: 0, P1: 0})
        self.cutter = Cutter(
            fmt,
            SCHEMA,
            dict(self.starts),
            last,
            Bounds(max_age=1e9, **bounds),
        )
        self.next = dict(self.starts)

    def __call__(self, part: str, record: Record) -> Position:
        at = Position("cdc", int(part[-1]), self.next[part])
        self.next[part] += 1
        self.cutter.check(at, record, NOW)
        self.cutter.feed(at, record, 0.0)
        return at

    def cut(self, delta: int) -> Cut:
        found = self.cutter.cut(delta, {P0, P1}, 0.0, WALL, force=True)
        assert found is not None
        return found[0]


BASE = datetime(2026, 2, 1, 10, 0)


def test_a_sequence_gone_backwards_after_a_cut_stops_naming_where() -> None:
    feed = Checked()
    for n in range(1, 6):
        feed(P0 if n % 2 else P1, change(BASE + timedelta(seconds=n), n, n))
    feed.cut(0)
    with pytest.raises(SequenceStop, match=r"partition 1 offset 2: changeSequence .* at or below"):
        feed(P1, change(BASE - timedelta(days=400), 6, 6))  # a clock change at the source
    # Nothing was fed: the change is neither held nor counted a duplicate.
    assert feed.cutter.pending == 0
    assert feed.cutter.duplicates == 0


def test_a_copy_of_a_change_a_cut_took_is_still_a_duplicate() -> None:
    feed = Checked()
    first = change(BASE, 1, 1)
    feed(P0, first)
    feed.cut(0)
    feed(P0, first)  # a producer retry, read after the cut
    assert feed.cutter.duplicates == 1


def test_a_late_change_from_a_quiet_partition_stops() -> None:
    """Delivery skew beyond --settle-seconds: P1 was quiet, the cut moved past its change."""
    feed = Checked()
    feed(P0, change(BASE + timedelta(seconds=5), 5, 5))
    feed.cut(0)
    with pytest.raises(SequenceStop, match="delivery later than --settle-seconds"):
        feed(P1, change(BASE + timedelta(seconds=3), 3, 3))


def test_after_a_restart_the_last_deltas_offsets_are_taken_and_seeded_copies_are_duplicates() -> (
    None
):
    feed = Checked()
    changes = [change(BASE + timedelta(seconds=n), n, n) for n in range(1, 4)]
    for c in changes:
        feed(P0, c)
    cut = feed.cut(0)
    restarted = Checked(last=cut, starts={P0: cut.spans[P0].next_lo, P1: 0})
    restarted(P0, change(BASE + timedelta(seconds=9), 9, 9))  # past the recorded offsets
    with pytest.raises(SequenceStop):  # a copy of a cut change, unknown to this run
        restarted(P0, changes[0])
    seeded = Checked(last=cut, starts={P0: cut.spans[P0].next_lo, P1: 0})
    seeded.cutter.guard.remember_taken(c.identity for c in changes)
    seeded(P0, changes[0])
    assert seeded.cutter.duplicates == 1


def test_a_small_step_back_in_a_partition_is_reordering_and_a_large_one_stops() -> None:
    feed = Checked()
    feed(P0, change(BASE + timedelta(minutes=30), 30, 30))
    feed(P0, change(BASE + timedelta(minutes=29), 29, 29))  # a producer's retry reordered it
    assert feed.cutter.pending == 2
    with pytest.raises(SequenceStop, match="went backwards"):
        feed(P0, change(BASE - timedelta(hours=2), 1, 1))


@pytest.mark.parametrize(
    "record",
    [
        change(datetime(2099, 1, 1), 1, 1),  # a sequence far ahead
        Change(
            (RowChange("t", 0, (1, "v")),),
            seq(BASE, 1),
            (seq(BASE, 1),),
            (seq(BASE, 1),),
            datetime(2099, 1, 1),
        ),  # a source time far ahead
    ],
)
def test_a_qlik_change_far_ahead_of_the_clock_stops(record: Change) -> None:
    with pytest.raises(SequenceStop, match="ahead of this origin's clock"):
        Checked()(P0, record)


def test_dataworks_times_far_ahead_of_the_clock_stop() -> None:
    far = int(datetime(2099, 1, 1, tzinfo=UTC).timestamp() * 1000)
    with pytest.raises(SequenceStop, match="eventTime"):
        Checked("dataworks")(P0, dw(1, far, 1))
    with pytest.raises(SequenceStop, match="heartbeat"):
        Checked("dataworks")(P0, Heartbeat(far))
    Checked("dataworks")(P0, Heartbeat(int(NOW.timestamp() * 1000)))


LIMIT_MS = int((NOW + timedelta(days=1)).timestamp() * 1000)  # the default max_ahead


@pytest.mark.parametrize(
    "event_ms",
    [LIMIT_MS, LIMIT_MS + 1, LIMIT_MS - 1, 0, -1, -(10**30), 10**30, 2**63, 253_402_300_799_999],
)
def test_the_eventtime_check_in_integers_decides_as_the_datetime_rule(event_ms: int) -> None:
    """The guard compares a DataWorks eventTime in integers where it can; the rule is the
    datetime one (an eventTime no datetime holds counts as far ahead)."""
    try:
        when = datetime(1970, 1, 1) + timedelta(milliseconds=event_ms)
    except OverflowError:
        when = datetime.max
    ahead = when > (NOW + timedelta(days=1)).replace(tzinfo=None)
    if ahead:
        with pytest.raises(SequenceStop, match="eventTime"):
            Checked("dataworks")(P0, dw(1, event_ms, 1))
    else:
        Checked("dataworks")(P0, dw(1, event_ms, 1))


@pytest.mark.parametrize(
    "value",
    [
        "9" * 40,  # the issue's: 40 nines
        "2026010100000000000000000000000000",  # 34 digits
        "20261301000000000000000000000000001",  # month 13
        "x2026010100000000000000000000000001",
        20260101000000000000000000000000001,
    ],
)
def test_a_change_sequence_not_as_qlik_writes_it_is_bad_input(value: object) -> None:
    with pytest.raises(BadInput, match="changeSequence"):
        sequence_key(value)


@pytest.mark.parametrize("value", [10**18, 1e20, float("inf"), "9999-12-31T23:59:59-14:00"])
def test_timestamps_out_of_range_are_bad_input_not_a_crash(value: object) -> None:
    with pytest.raises(BadInput, match="is not a time"):
        source_time(value)


def test_the_taken_memory_is_bounded() -> None:
    guard = SequenceGuard("qlik", timedelta(days=1), timedelta(minutes=10))
    for batch in range(5):
        guard.remember_taken((batch, i) for i in range(MAX_TAKEN // 2))
    assert guard.taken((4, 0))
    assert not guard.taken((0, 0))
