"""Replays and an aged registry, in the tracker alone: a transfer of a delta already applied
stages nothing and takes no slot or budget, replays have a bound of their own, eviction
keeps the expected delta, and memory keeps a bounded window of applied deltas."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from protocol.body_writer import encode_body
from protocol.errors import ErrorCode
from protocol.schema import LogicalSchema
from protocol.sequence import AppliedDelta
from replica_agent.admission import Accepted, Dropped, TransferLimits
from replica_agent.applied_window import AppliedWindow
from replica_agent.tracker import TransferTracker
from tests.agent.test_tracker import code_of, day, key


def tracker_of(marketing: LogicalSchema, last: int = 1, **limits: Any) -> TransferTracker:
    applied = {n: day(n) for n in range(last + 1)}
    return TransferTracker(
        {"marketing": marketing}, {"marketing": applied}, limits=TransferLimits(**limits)
    )


def whole(request_id: str, delta: int) -> list[Any]:
    """Every chunk of a two-stream transfer of `delta`."""
    return [
        key(request_id=request_id, delta_num=delta, delta_date=day(delta), is_last_chunk=True),
        key(
            request_id=request_id,
            delta_num=delta,
            delta_date=day(delta),
            stream_number=2,
            table_name="stores",
            is_last_chunk=True,
        ),
    ]


def test_a_replay_takes_no_slot_and_no_staging_budget(marketing: LogicalSchema) -> None:
    sales = marketing.table("sales")
    body = encode_body(sales, [(i, 0, "P" * 40, 1, 1, None, 0) for i in range(100)])
    tracker = tracker_of(marketing, max_open_transfers=1, max_staged_bytes=2 * len(body))
    for n in range(10):  # ten replays of delta 0, each with a real body
        admission = tracker.admit(key(request_id=f"old{n}", delta_num=0, delta_date=day(0)), body)
        assert isinstance(admission, Accepted)
        assert admission.transfer.replay
    assert tracker.staged_bytes() == 0
    real = tracker.admit(key(request_id="real"), body)  # the expected delta 2
    assert isinstance(real, Accepted)
    assert not real.transfer.replay
    assert tracker.take_evicted() == []
    assert tracker.staged_bytes() == len(body)


def test_a_complete_replay_is_answered_from_the_registry(marketing: LogicalSchema) -> None:
    tracker = tracker_of(marketing)
    first, last = whole("again", 1)
    tracker.admit(first, None)
    completed = tracker.admit(last, None)
    assert isinstance(completed, Accepted)
    assert completed.completed
    assert tracker.decide(completed.transfer).action == "answer-stored"


def test_replays_beyond_their_bound_drop_the_oldest_unanswered(marketing: LogicalSchema) -> None:
    tracker = tracker_of(marketing, max_replays=3)
    for n in range(5):
        tracker.admit(key(request_id=f"old{n}", delta_num=1, delta_date=day(1)), None)
    assert [t.request_id for t in tracker.take_dropped_replays()] == ["old0", "old1"]
    assert tracker.take_evicted() == []  # never answered INCOMPLETE_DELTA
    assert sorted(tracker.open) == ["old2", "old3", "old4"]
    assert isinstance(tracker.admit(key(request_id="old0", chunk_number=2), None), Dropped)


def test_replay_chunks_have_a_bound(marketing: LogicalSchema) -> None:
    tracker = tracker_of(marketing, max_replay_chunks=50)
    for chunk in range(1, 41):
        tracker.admit(key(request_id="a", delta_num=0, delta_date=day(0), chunk_number=chunk), None)
    for chunk in range(1, 21):
        tracker.admit(key(request_id="b", delta_num=0, delta_date=day(0), chunk_number=chunk), None)
    assert [t.request_id for t in tracker.take_dropped_replays()] == ["a"]
    assert list(tracker.open) == ["b"]


def test_eviction_keeps_the_expected_delta_over_others(marketing: LogicalSchema) -> None:
    """The expected delta's transfer, though it has the fewest chunks, outlives one that
    the registry moved past while it was receiving."""
    tracker = tracker_of(marketing, max_open_transfers=2)
    for chunk in range(1, 6):
        tracker.admit(key(request_id="stale", chunk_number=chunk), None)  # delta 2
    tracker.record_applied("marketing", 2, day(2))  # applied meanwhile (another writer)
    tracker.admit(key(request_id="next", delta_num=3, delta_date=day(3)), None)
    tracker.admit(key(request_id="next-again", delta_num=3, delta_date=day(3)), None)
    assert [t.request_id for t in tracker.take_evicted()] == ["stale"]


def test_a_delta_below_the_window_is_applied_its_date_left_to_the_registry(
    marketing: LogicalSchema,
) -> None:
    tracker = tracker_of(marketing, last=5000, applied_window=100, max_date_skew=None)
    assert len(tracker.applied["marketing"]) == 100
    assert tracker.expected("marketing") == 5001
    old = key(request_id="old", delta_num=10, delta_date=day(99), is_last_chunk=True)
    admission = tracker.admit(old, None)  # a date the registry may contradict
    assert isinstance(admission, Accepted)
    assert admission.transfer.replay
    # Inside the window the date is checked at once.
    recent = key(request_id="recent", delta_num=4990, delta_date=day(1))
    assert code_of(tracker.admit(recent, None)) is ErrorCode.DELTA_CONFLICT
    # Ahead is still out of sequence.
    ahead = key(request_id="ahead", delta_num=5002, delta_date=day(6000))
    assert code_of(tracker.admit(ahead, None)) is ErrorCode.OUT_OF_SEQUENCE


def test_the_window_keeps_the_last_deltas_only() -> None:
    window = AppliedWindow({n: day(n) for n in range(10)}, capacity=3)
    assert window.last == AppliedDelta(9, day(9))
    assert (window.date_of(6), window.date_of(7)) == (None, day(7))
    assert window.holds(0)
    assert window.holds(9)
    assert not window.holds(10)
    assert not window.holds(-1)
    window.record(10, day(10))
    assert len(window) == 3
    assert window.date_of(8) == day(8)
    assert window.date_of(7) is None
    assert AppliedWindow().last is None
    assert not AppliedWindow().holds(0)
    with pytest.raises(ValueError, match="one delta"):
        AppliedWindow(capacity=0)
    same = AppliedWindow([AppliedDelta(n, day(n)) for n in range(8, 11)], capacity=3)
    assert same.same_as(window)


def test_a_million_applied_deltas_cost_memory_of_the_window(marketing: LogicalSchema) -> None:
    applied = {n: datetime(2000, 1, 1, tzinfo=UTC) + timedelta(seconds=n) for n in range(10**6)}
    tracker = TransferTracker({"marketing": marketing}, {"marketing": applied})
    assert len(tracker.applied["marketing"]) == TransferLimits().applied_window
    assert tracker.expected("marketing") == 10**6
