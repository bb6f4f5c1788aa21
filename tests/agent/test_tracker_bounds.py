"""The tracker under hostile keys: every bound answers at once, and memory stays bounded."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.body_writer import encode_body
from protocol.errors import ErrorCode
from protocol.messages import DeltaInKey
from protocol.schema import LogicalSchema
from replica_agent.admission import Accepted, Dropped, Rejected, TransferLimits
from replica_agent.tracker import TransferTracker
from replica_agent.transfers import CHUNK_COST
from tests.agent.test_tracker import code_of, key

D2 = datetime(2026, 1, 3, tzinfo=UTC)


def tracker_of(marketing: LogicalSchema, **limits: Any) -> TransferTracker:
    applied = {0: D2 - timedelta(days=2), 1: D2 - timedelta(days=1)}
    return TransferTracker(
        {"marketing": marketing}, {"marketing": applied}, limits=TransferLimits(**limits)
    )


def test_stream_total_above_the_table_count_is_bad_chunk_at_once(
    marketing: LogicalSchema,
) -> None:
    tracker = tracker_of(marketing)
    started = time.perf_counter()
    rejected = tracker.admit(key(stream_total=2**62, stream_number=1), None)
    assert code_of(rejected) is ErrorCode.BAD_CHUNK
    assert isinstance(rejected, Rejected)
    assert "outside 1..3" in rejected.message
    assert time.perf_counter() - started < 0.1


def test_chunk_numbers_above_the_limit_are_bad_chunk(marketing: LogicalSchema) -> None:
    tracker = tracker_of(marketing, max_chunk_number=1000)
    assert isinstance(tracker.admit(key(chunk_number=1000), None), Accepted)
    assert code_of(tracker.admit(key(request_id="r2", chunk_number=1001), None)) == "BAD_CHUNK"


def test_missing_lists_are_capped_with_a_count(marketing: LogicalSchema) -> None:
    tracker = tracker_of(marketing, max_chunk_number=10**6)
    for chunk in range(1, 2000, 2):  # every other chunk: a thousand gaps
        tracker.admit(key(chunk_number=chunk), None)
    (transfer,) = tracker.open.values()
    started = time.perf_counter()
    missing = transfer.progress(100).missing
    assert time.perf_counter() - started < 0.5
    assert len(missing) == 101
    assert missing[0] == "stream 1 chunks 2-2"
    assert missing[-1] == "and 901 more gaps"  # 999 inner gaps + 2 last-chunk items - 100


def test_names_longer_than_any_origins_are_dropped_unanswered(marketing: LogicalSchema) -> None:
    tracker = tracker_of(marketing)
    for changes in (
        {"datamart": "m" * 340_000},
        {"request_id": "r" * 1000},
        {"table_name": "t" * 300},
        {"subscription": "s" * 70_000},
    ):
        dropped = tracker.admit(key(**changes), None)
        assert isinstance(dropped, Dropped)
        assert dropped.reason == "oversize"
        assert len(dropped.request_id) <= 256
    assert tracker.open == {}


def test_the_oldest_receiving_transfer_is_evicted_beyond_the_open_budget(
    marketing: LogicalSchema,
) -> None:
    tracker = tracker_of(marketing, max_open_transfers=3)
    for n in range(5):
        assert isinstance(tracker.admit(key(request_id=f"r{n}"), None), Accepted)
    assert list(tracker.open) == ["r2", "r3", "r4"]
    assert [t.request_id for t in tracker.take_evicted()] == ["r0", "r1"]
    assert tracker.take_evicted() == []
    assert isinstance(tracker.admit(key(request_id="r0", chunk_number=2), None), Dropped)


def test_the_staged_bytes_budget_evicts_the_oldest_receiving_transfer(
    marketing: LogicalSchema,
) -> None:
    sales = marketing.table("sales")
    body = encode_body(sales, [(i, 0, "P" * 40, 1, 1, None, 0) for i in range(100)])
    size = len(body)
    assert size > CHUNK_COST
    tracker = tracker_of(marketing, max_staged_bytes=3 * size)
    tracker.admit(key(request_id="a"), body)
    tracker.sealed(tracker.open["a"], {})  # handed to the loader: never evicted
    tracker.admit(key(request_id="b"), body)
    tracker.admit(key(request_id="c"), body)
    assert tracker.staged_bytes() == 3 * size
    assert tracker.take_evicted() == []
    admission = tracker.admit(key(request_id="d"), body)  # one body too many
    assert isinstance(admission, Accepted)
    assert [t.request_id for t in tracker.take_evicted()] == ["b"]
    assert set(tracker.open) == {"a", "c", "d"}
    assert tracker.staged_bytes() == 3 * size
    # When only the new transfer itself can go, it goes: dropped, and answered by the caller.
    tracker.sealed(tracker.open["c"], {})
    tracker.sealed(tracker.open["d"], {})
    dropped = tracker.admit(key(request_id="e"), body)
    assert isinstance(dropped, Dropped)
    assert dropped.reason == "evicted"
    assert [t.request_id for t in tracker.take_evicted()] == ["e"]


def test_the_transfer_furthest_along_is_kept_and_the_least_along_evicted(
    marketing: LogicalSchema,
) -> None:
    """A delta well on its way outlives transfers that have barely begun: a flood of junk
    transfers (one chunk each) used to evict it, the oldest, 0.4 s after its first chunk."""
    tracker = tracker_of(marketing, max_open_transfers=3)
    for chunk in range(1, 6):
        assert isinstance(tracker.admit(key(request_id="real", chunk_number=chunk), None), Accepted)
    for n in range(6):
        tracker.admit(key(request_id=f"junk{n}"), None)
    assert "real" in tracker.open
    assert [t.request_id for t in tracker.take_evicted()] == [f"junk{n}" for n in range(4)]


def test_transfers_handed_to_the_loader_count_toward_the_open_limit(
    marketing: LogicalSchema,
) -> None:
    tracker = tracker_of(marketing, max_open_transfers=2)
    tracker.admit(key(request_id="sealed"), None)
    tracker.sealed(tracker.open["sealed"], {})
    tracker.admit(key(request_id="a"), None)
    assert tracker.take_evicted() == []
    tracker.admit(key(request_id="b"), None)  # the sealed one holds a place: "a" goes
    assert [t.request_id for t in tracker.take_evicted()] == ["a"]
    assert set(tracker.open) == {"sealed", "b"}


def test_empty_chunks_cost_staging_budget_too(marketing: LogicalSchema) -> None:
    tracker = tracker_of(marketing, max_staged_bytes=10 * CHUNK_COST)
    for chunk in range(1, 11):
        assert isinstance(tracker.admit(key(request_id="e", chunk_number=chunk), b""), Accepted)
    assert tracker.staged_bytes() == 10 * CHUNK_COST
    assert isinstance(tracker.admit(key(request_id="e", chunk_number=11), b""), Dropped)


def test_chunks_of_a_transfer_being_loaded_never_reject_it(marketing: LogicalSchema) -> None:
    tracker = tracker_of(marketing)
    for k in (
        key(chunk_number=1, is_last_chunk=True),
        key(stream_number=2, table_name="stores", is_last_chunk=True),
        key(stream_number=3, table_name="agreements", is_last_chunk=True, stream_total=3),
    ):
        tracker.admit(k.model_copy(update={"stream_total": 3}), None)
    (transfer,) = tracker.open.values()
    assert transfer.complete
    tracker.sealed(transfer, {})
    tracker.load_started(transfer)
    # A chunk beyond the last, and a changed date: rejections before; dropped now.
    later = D2 + timedelta(days=1)
    for noise in (key(chunk_number=5, stream_total=3), key(chunk_number=2, delta_date=later)):
        dropped = tracker.admit(noise, None)
        assert isinstance(dropped, Dropped)
        assert dropped.reason == "sealed"
    duplicate = tracker.admit(key(chunk_number=1, is_last_chunk=True, stream_total=3), None)
    assert isinstance(duplicate, Accepted)
    assert not duplicate.new
    assert tracker.open == {"r1": transfer}


def test_a_transfer_of_a_delta_applied_under_another_request_is_superseded(
    marketing: LogicalSchema,
) -> None:
    tracker = tracker_of(marketing)
    tracker.admit(key(), None)
    assert tracker.superseded("marketing") == []
    tracker.record_applied("marketing", 2, D2)
    assert [t.request_id for t in tracker.superseded("marketing")] == ["r1"]


def test_the_finished_request_ids_remembered_are_capped(marketing: LogicalSchema) -> None:
    tracker = tracker_of(marketing, max_finished=100)
    for n in range(1000):
        tracker.admit(key(request_id=f"x{n}", datamart="nope"), None)
    assert not tracker.is_finished("x0")
    assert tracker.is_finished("x999")
    assert len(tracker._finished) == 100


# --- properties under arbitrary keys -------------------------------------------------------

absurd = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.integers(-3, 6), st.sampled_from([0, 1, 2**31, 2**62])
)
names = st.one_of(st.sampled_from(["sales", "stores", "agreements", "nope"]), st.text(max_size=8))
noise_keys = st.builds(
    lambda rid, dm, num, day, table, s, total, c, last: DeltaInKey(
        request_id=rid,
        datamart=dm,
        delta_num=num,
        delta_date=D2 + timedelta(days=day),
        subscription="x",
        table_name=table,
        stream_number=s,
        stream_total=total,
        chunk_number=c,
        is_last_chunk=last,
    ),
    st.sampled_from(["n1", "n2", "n3", "n4", "n5", "n6"]) | st.text(max_size=5),
    st.sampled_from(["marketing", "other"]),
    st.sampled_from([0, 2, 3]) | absurd,
    st.integers(-2, 2),
    names,
    absurd,
    absurd,
    absurd,
    st.booleans(),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(noise_keys, max_size=60), st.randoms(use_true_random=False))
def test_noise_never_raises_stays_bounded_and_a_valid_transfer_still_completes(
    marketing: LogicalSchema, noise: list[DeltaInKey], rng: object
) -> None:
    tracker = tracker_of(marketing, max_open_transfers=4, max_finished=50, max_chunk_number=100)
    valid = [
        key(request_id="valid", stream_total=3, chunk_number=1),
        key(request_id="valid", stream_total=3, chunk_number=2, is_last_chunk=True),
        key(
            request_id="valid",
            stream_total=3,
            stream_number=2,
            table_name="stores",
            is_last_chunk=True,
        ),
        key(
            request_id="valid",
            stream_total=3,
            stream_number=3,
            table_name="agreements",
            is_last_chunk=True,
        ),
    ]
    stream = list(noise)
    for position, k in enumerate(valid):  # interleaved at spread positions
        stream.insert(min(len(stream), position * 7), k)
    completed = False
    for k in stream:
        admission = tracker.admit(k, None)  # never raises
        tracker.take_evicted()
        if isinstance(admission, Accepted) and admission.transfer.request_id == "valid":
            completed |= admission.completed
        for transfer in tracker.open.values():
            transfer.progress(10)  # never raises, never enumerates claimed numbers
        assert len(tracker.open) <= 4 * 2  # a budget per datamart served (and no other)
        assert len(tracker._finished) <= 50
    assert completed or tracker.is_finished("valid")
    if not completed:  # only a noise key with requestId "valid" can have finished it
        assert any(k.request_id == "valid" for k in noise)


def test_the_disks_room_caps_the_budget_but_never_evicts_the_arriving_transfer(
    marketing: LogicalSchema,
) -> None:
    sales = marketing.table("sales")
    body = encode_body(sales, [(i, 0, "P" * 40, 1, 1, None, 0) for i in range(100)])
    tracker = tracker_of(marketing)
    tracker.admit(key(request_id="old"), body)
    tracker.disk_room(0)  # the disk is full
    tracker.admit(key(request_id="new"), body)
    assert [t.request_id for t in tracker.take_evicted()] == ["old"]
    tracker.disk_room(0)
    assert isinstance(tracker.admit(key(request_id="new", chunk_number=2), body), Accepted)
    assert tracker.take_evicted() == []  # alone: its write fails and intake waits instead


def test_a_full_disk_evicts_the_transfer_least_far_along_but_not_the_refused_ones(
    marketing: LogicalSchema,
) -> None:
    sales = marketing.table("sales")
    body = encode_body(sales, [(i, 0, "P" * 40, 1, 1, None, 0) for i in range(10)])
    tracker = tracker_of(marketing)
    for chunk in (1, 2, 3):
        tracker.admit(key(request_id="far", chunk_number=chunk), body)
    tracker.admit(key(request_id="barely"), body)
    tracker.admit(key(request_id="refused"), body)
    victim = tracker.evict_for_disk({"refused"})
    assert victim is not None
    assert victim.request_id == "barely"
    assert tracker.is_finished("barely")
    assert tracker.evict_for_disk({"refused", "far"}) is None
