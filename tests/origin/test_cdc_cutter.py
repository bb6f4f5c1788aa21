"""The cutter's rules (docs/contracts/CDC.md), on records made by hand: no Kafka, time passed in."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podd_cdc.cutlog import Cut
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.held import Pending, untaken
from podd_cdc.membership import rebuild
from podd_cdc.records import Change, Heartbeat, Position, Record, RowChange
from podd_cdc.rows import rows_digest
from protocol.apply_model import DeltaRow
from protocol.ddl import parse_schema

SCHEMA = parse_schema("CREATE TABLE dm.t (k BIGINT NOT NULL, v VARCHAR, PRIMARY KEY (k));")
WALL = datetime(2026, 1, 1, tzinfo=UTC)
P0, P1 = "cdc:0", "cdc:1"


def qlik(
    seq: int, key: int, tx: str | None = None, n: int = 1, last: bool = True, value: str = "v"
) -> Change:
    s = f"{seq:040d}"
    when = datetime(2026, 2, 1, 0, 0, seq)
    return Change(
        (RowChange("t", 0, (key, value)),), s, (s,), (s,), when, tx, n if tx else None, last
    )


def refresh(key: int) -> Change:
    return Change((RowChange("t", 0, (key, "full")),), None, ("",), None)


def dw(seq: int, event_ms: int, key: int, value: str = "v") -> Change:
    return Change(
        (RowChange("t", 0, (key, value)),),
        event_ms,
        (seq, 1),
        (seq, "INSERT"),
        None,
        None,
        None,
        True,
    )


class Feed:
    """A cutter and the records fed to it, by partition, with offsets counted."""

    def __init__(
        self,
        fmt: str,
        bounds: Bounds | None = None,
        last: Cut | None = None,
        starts: dict[str, int] | None = None,
    ) -> None:
        bounds = bounds or Bounds(max_age=1e9)
        self.cutter = Cutter(fmt, SCHEMA, starts or {P0: 0, P1: 0}, last, bounds)  # type: ignore[arg-type]
        self.fed: list[tuple[Position, Record]] = []
        self.next = dict(starts or {P0: 0, P1: 0})

    def __call__(self, part: str, *records: Record) -> Feed:
        for record in records:
            at = Position("cdc", int(part[-1]), self.next[part])
            self.next[part] += 1
            self.cutter.feed(at, record, 0.0)
            self.fed.append((at, record))
        return self

    def try_cut(
        self, quiet: set[str] | None = None, delta: int = 0
    ) -> tuple[Cut, dict[str, list[DeltaRow]]] | None:
        return self.cutter.cut(delta, set(quiet or ()), 0.0, WALL, force=True)

    def cut(
        self, quiet: set[str] | None = None, delta: int = 0
    ) -> tuple[Cut, dict[str, list[DeltaRow]]]:
        found = self.try_cut(quiet, delta)
        assert found is not None, "no delta was cut"
        return found


def keys(rows: dict[str, list[DeltaRow]]) -> list[int]:
    return sorted(r.values[0] for r in rows["t"])


def test_a_transaction_over_two_partitions_waits_for_its_last_counter() -> None:
    feed = Feed("qlik")(P0, qlik(1, 1, "A", 1, False), qlik(3, 3, "A", 3, True))
    feed(P1, qlik(4, 4, "B", 1, True))
    assert feed.try_cut() is None  # A lacks its counter 2
    feed(P0, qlik(5, 5, "C", 1, True))
    assert feed.try_cut() is None  # A lacks counter 2 and everything after A waits for it
    feed(P1, qlik(2, 2, "A", 2, False))  # (a partition may carry A's middle late)
    cut, rows = feed.cut()
    assert keys(rows) == [1, 2, 3, 4]  # A and B; C waits: P1 may still deliver below 5
    assert cut.bound == f"{4:040d}"


def test_a_partition_behind_holds_the_bound_until_it_is_quiet() -> None:
    feed = Feed("qlik")(P0, qlik(1, 1), qlik(5, 5))(P1, qlik(2, 2))
    _, rows = feed.cut()
    assert keys(rows) == [1, 2]  # P1 read only to 2: nothing above it is safe yet
    _, rows = feed.cut(quiet={P1}, delta=1)
    assert keys(rows) == [5]


def test_a_complete_transaction_that_overlaps_an_open_one_waits() -> None:
    # A (1, 5) is complete, but B began at 3 and is open: taking A would leave a change
    # below A's last one behind.
    feed = Feed("qlik")(
        P0, qlik(1, 1, "A", 1, False), qlik(3, 3, "B", 1, False), qlik(5, 5, "A", 2, True)
    )(P1, qlik(6, 6))
    assert feed.try_cut() is None
    feed(P1, qlik(7, 7, "B", 2, True))
    _, rows = feed.cut(quiet={P0, P1})
    assert keys(rows) == [1, 3, 5, 6, 7]


def test_deltas_close_at_the_size_bound_on_transaction_boundaries() -> None:
    feed = Feed("qlik", Bounds(max_rows=3, max_age=1e9))
    feed(P0, *(qlik(i, i, f"T{i // 2}", 1 + i % 2, i % 2 == 1) for i in range(8)))
    sizes: list[int] = []
    while (found := feed.try_cut(quiet={P0, P1}, delta=len(sizes))) is not None:
        sizes.append(found[0].changes)
    assert sizes == [4, 4]  # transactions of 2: the second one reaches 3, never split


def test_duplicates_count_once_before_and_after_a_cut() -> None:
    feed = Feed("qlik")(P0, qlik(1, 1), qlik(1, 1), qlik(2, 2))
    _, rows = feed.cut(quiet={P0, P1})
    assert keys(rows) == [1, 2]
    feed(P1, qlik(2, 2), qlik(3, 3))  # a redelivery of 2 after its delta was cut
    _, rows = feed.cut(quiet={P0, P1}, delta=1)
    assert keys(rows) == [3]
    assert feed.cutter.duplicates == 2


def test_full_load_rows_go_with_the_cdc_change_after_them() -> None:
    feed = Feed("qlik")(P0, refresh(7), refresh(8))(P1, refresh(9))
    assert feed.try_cut() is None  # no CDC change yet, no partition quiet
    feed(P0, qlik(1, 1))(P1, qlik(2, 2))
    _, rows = feed.cut()
    assert keys(rows) == [1, 7, 8]  # P1's full load waits for its first change under the bound
    _, rows = feed.cut(quiet={P0, P1}, delta=1)
    assert keys(rows) == [2, 9]


def test_dataworks_cuts_at_the_smallest_heartbeat_and_a_late_change_goes_next() -> None:
    feed = Feed("dataworks")(P0, dw(1, 100, 1), Heartbeat(150), dw(3, 200, 3), Heartbeat(250))
    feed(P1, dw(2, 120, 2), Heartbeat(140))
    cut, rows = feed.cut()
    assert (cut.bound, keys(rows)) == (140, [1, 2])
    feed(P1, dw(4, 130, 4), Heartbeat(300))  # eventTime 130 <= 140: late
    cut, rows = feed.cut(delta=1)
    assert (cut.bound, keys(rows)) == (250, [3, 4])
    assert feed.cutter.late == 1


def test_a_partition_without_heartbeats_does_not_hold_the_watermark() -> None:
    feed = Feed("dataworks")(P0, dw(1, 100, 1), Heartbeat(200))(P1, dw(2, 150, 2))
    assert feed.try_cut() is None  # P1 may still deliver its first heartbeat
    cut, rows = feed.cut(quiet={P1})  # read to its end without one: it holds nothing back
    assert (cut.bound, keys(rows)) == (200, [1, 2])
    assert feed.cutter.silent == {P1}


def test_the_partitions_read_ahead_of_the_bound_are_named() -> None:
    P2 = "cdc:2"
    feed = Feed("qlik", starts={P0: 0, P1: 0, P2: 0})(P0, qlik(1, 1), qlik(5, 5))
    assert feed.cutter.ahead(set()) == ({P0}, None)  # P1 and P2 have given no sequence yet
    feed(P1, qlik(2, 2))(P2, qlik(3, 3))
    assert feed.cutter.ahead(set()) == ({P0, P2}, f"{2:040d}")  # P1 holds the bound at 2
    assert feed.cutter.ahead({P1}) == ({P0}, f"{3:040d}")  # quiet, P1 holds nothing back
    feed(P1, qlik(5, 6))
    assert feed.cutter.ahead(set())[0] == {P0, P1}  # P2 at 3 now; P0 and P1 tie at 5


def test_dataworks_partitions_ahead_by_heartbeat_and_a_silent_one_holds_nothing() -> None:
    feed = Feed("dataworks")(P0, dw(1, 100, 1), Heartbeat(200))(P1, dw(2, 150, 2))
    assert feed.cutter.ahead(set()) == ({P0}, None)  # P1 may still deliver its first heartbeat
    feed.cut(quiet={P1})
    assert feed.cutter.silent == {P1}
    assert feed.cutter.ahead(set()) == (set(), 200)  # P0 alone holds the watermark


@given(
    st.dictionaries(
        st.sampled_from(["cdc:0", "cdc:1", "cdc:2", "cdc:3"]),
        st.one_of(st.none(), st.integers(0, 5)),
        min_size=1,
    ),
    st.sets(st.sampled_from(["cdc:0", "cdc:1", "cdc:2", "cdc:3"])),
)
def test_some_partition_that_holds_the_bound_is_always_read(
    last: dict[str, int | None], quiet: set[str]
) -> None:
    """Reading only the partitions not `ahead` never stalls: one of those that hold the
    bound back is always among them, and every one of them is at the bound or before it."""
    cutter = Cutter("qlik", SCHEMA, dict.fromkeys(last, 0), None, Bounds())
    for key, sequence in last.items():
        cutter.parts[key].last_key = None if sequence is None else f"{sequence:040d}"
    ahead, bound = cutter.ahead(quiet)
    holding = {k: cutter.parts[k].last_key for k in last if k not in quiet}
    if not holding:
        assert (ahead, bound) == (set(), None)
        return
    read = set(holding) - ahead
    assert read, "every partition that holds the bound waits"
    lowest = None if None in holding.values() else min(holding.values())
    assert bound == lowest
    assert all(holding[k] == lowest for k in read)
    assert all(holding[k] != lowest for k in ahead)


def test_a_date_not_later_than_the_last_is_raised_by_a_microsecond() -> None:
    feed = Feed("qlik")(P0, qlik(1, 1))
    first, _ = feed.cut(quiet={P0, P1})
    feed(
        P0,
        Change(
            (RowChange("t", 0, (2, "v")),), f"{2:040d}", (f"{2:040d}",), None, datetime(2020, 1, 1)
        ),
    )
    second, _ = feed.cut(quiet={P0, P1}, delta=1)
    assert (second.date - first.date).total_seconds() == pytest.approx(1e-6)


@pytest.mark.parametrize("fmt", ["qlik", "dataworks"])
def test_a_rebuilt_delta_is_the_delta_first_cut(fmt: str) -> None:
    """Cut live with changes carried over, then rebuild each delta from its spans alone."""
    feed = Feed(fmt)
    if fmt == "qlik":
        feed(P0, qlik(1, 1, "A", 1, False), qlik(3, 3), qlik(6, 6))(P1, qlik(2, 2, "A", 2, True))
        feed(P1, qlik(4, 4), qlik(4, 4))
    else:
        feed(P0, dw(1, 100, 1), dw(5, 500, 5), Heartbeat(300))(P1, dw(2, 200, 2), Heartbeat(250))
    cuts = []
    cuts.append(feed.cut())
    if fmt == "qlik":
        feed(P1, qlik(7, 7), qlik(8, 1, value="again"))
    else:
        feed(P1, dw(3, 210, 3), dw(6, 600, 6), Heartbeat(700))(P0, Heartbeat(800))
    cuts.append(feed.cut(quiet={P0, P1}, delta=1))
    previous = None
    for cut, rows in cuts:
        again = rebuild(fmt, SCHEMA, cut, previous, feed.fed)  # type: ignore[arg-type]
        assert rows_digest(again) == cut.digest == rows_digest(rows)
        previous = cut
    # and a cutter started from the last cut drops what it took when fed the same again
    resumed = Feed(
        fmt, last=cuts[-1][0], starts={k: s.next_lo for k, s in cuts[-1][0].spans.items()}
    )
    for at, record in feed.fed:
        if at.offset >= cuts[-1][0].spans[f"cdc:{at.partition}"].next_lo:
            resumed.cutter.feed(at, record, 0.0)
    assert resumed.cutter.pending == feed.cutter.pending


def test_cut_ahead_closes_only_full_deltas_and_a_look_too_early_is_not_repeated() -> None:
    feed = Feed("qlik", Bounds(max_rows=3, max_age=10.0))
    feed(P0, qlik(1, 1), qlik(2, 2))
    feed(P1, qlik(3, 3))  # P1 may still deliver below 3: only 1 and 2 can be cut
    cutter = feed.cutter
    assert cutter.cut(0, set(), 9.9, WALL) is None  # not old enough (arrived at 0.0), not full
    assert cutter.cut(0, set(), 10.5, WALL) is None  # old enough, but looked 0.6 s ago
    found = cutter.cut(0, set(), 11.0, WALL)  # a look again: due by age
    assert found is not None
    assert keys(found[1]) == [1, 2]
    feed(P0, qlik(4, 4))  # 3 and 4 held; P1 read to 3: only 3 can be cut
    assert cutter.cut(1, set(), 50.0, WALL, by_age=False) is None  # ahead: not full
    found = cutter.cut(1, set(), 50.0, WALL)  # a look ahead does not hold back one by age
    assert found is not None
    assert keys(found[1]) == [3]
    feed(P0, qlik(5, 5), qlik(6, 6))
    feed(P1, qlik(7, 7))
    ahead = cutter.cut(2, set(), 50.0, WALL, by_age=False)  # 4, 5, 6 below the bound: full
    assert ahead is not None
    assert keys(ahead[1]) == [4, 5, 6]


@given(st.lists(st.booleans(), max_size=60))
def test_a_partition_keeps_exactly_what_a_cut_did_not_take(flags: list[bool]) -> None:
    """The cut drops taken changes from a partition by walking only as far as the last one
    taken: what remains is every untaken change, in order, wherever the taken ones were."""
    pending = []
    for offset, taken in enumerate(flags):
        item = Pending(Position("t", 0, offset), Change((), str(offset), (str(offset),), None), 0.0)
        item.taken = taken
        pending.append(item)
    left = untaken(pending, sum(flags))
    assert [i.at.offset for i in left] == [i.at.offset for i in pending if not i.taken]


@given(
    st.lists(
        st.tuples(st.sampled_from([P0, P1]), st.booleans(), st.integers(0, 30), st.floats(0, 50)),
        max_size=80,
    ),
    st.integers(1, 20),
)
def test_a_dataworks_look_counts_and_ages_what_it_would_take(
    steps: list[tuple[str, bool, int, float]], max_rows: int
) -> None:
    """A look counts and ages the changes below the watermark without listing them; its
    count and oldest arrival are those of the changes it lists once a delta is due, through
    heartbeats, cuts and late changes."""
    cutter = Cutter("dataworks", SCHEMA, {P0: 0, P1: 0}, None, Bounds(max_rows=max_rows))
    offsets = {P0: 0, P1: 0}
    for n, (part, beat, millis, now) in enumerate(steps):
        at = Position("cdc", int(part[-1]), offsets[part])
        offsets[part] += 1
        cutter.feed(at, Heartbeat(millis) if beat else dw(n, millis, n % 7), now)
        choice = cutter.look(set())
        items = choice.items()
        assert choice.count == len(items)
        assert choice.oldest == min((i.arrived for i in items), default=math.inf)
        if n % 5 == 4:
            cutter.cut(n, set(), 100.0, WALL, force=True)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([P0, P1]),
            st.sampled_from([None, "a", "b"]),
            st.booleans(),
            st.floats(0, 50),
        ),
        max_size=60,
    )
)
def test_a_qlik_look_counts_and_ages_what_it_would_take(
    steps: list[tuple[str, str | None, bool, float]],
) -> None:
    """As for DataWorks: a Qlik look's count and oldest arrival, taken from the transactions
    held, are those of the changes it lists."""
    cutter = Cutter("qlik", SCHEMA, {P0: 0, P1: 0}, None, Bounds(max_rows=5))
    offsets = {P0: 0, P1: 0}
    counters: dict[str, int] = {}
    for n, (part, name, last, now) in enumerate(steps):
        at = Position("cdc", int(part[-1]), offsets[part])
        offsets[part] += 1
        tx = None if name is None else f"{name}{n // 10}"  # a new transaction every ten steps
        if tx is not None:
            counters[tx] = counters.get(tx, 0) + 1
        change = qlik(n + 1, n % 7, tx, counters.get(str(tx), 1), last)
        cutter.feed(at, change, now)
        choice = cutter.look({P0} if n % 3 else set())
        items = choice.items()
        assert choice.count == len(items)
        assert choice.oldest == min((i.arrived for i in items), default=math.inf)
        if n % 4 == 3:
            cutter.cut(n, {P0, P1}, 100.0, WALL, force=True)
