"""The transfer tracker, alone: every framing rule and every error code it decides."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from protocol.body_writer import encode_body
from protocol.chunk_range import ChunkRange
from protocol.errors import ErrorCode
from protocol.messages import DeltaInKey
from protocol.schema import LogicalSchema
from replica_agent.admission import Accepted, Dropped, Rejected
from replica_agent.tracker import TransferTracker
from replica_agent.transfers import Offer, Phase

D0 = datetime(2026, 1, 1, tzinfo=UTC)


def day(n: int) -> datetime:
    return D0 + timedelta(days=n)


@pytest.fixture
def tracker(marketing: LogicalSchema) -> TransferTracker:
    # Deltas 0 and 1 applied; delta 2 is expected.
    return TransferTracker({"marketing": marketing}, {"marketing": {0: day(0), 1: day(1)}})


def key(**changes: object) -> DeltaInKey:
    base = DeltaInKey(
        request_id="r1",
        datamart="marketing",
        delta_num=2,
        delta_date=day(2),
        subscription="SELECT * FROM marketing.sales",
        table_name="sales",
        stream_number=1,
        stream_total=2,
        chunk_number=1,
        is_last_chunk=False,
    )
    return base.model_copy(update=changes)


def code_of(admission: object) -> ErrorCode:
    assert isinstance(admission, Rejected), admission
    return admission.code


def test_a_complete_transfer_in_any_order(tracker: TransferTracker) -> None:
    keys = [
        key(chunk_number=1),
        key(chunk_number=2),
        key(chunk_number=3, is_last_chunk=True),
        key(stream_number=2, table_name="stores", chunk_number=1, is_last_chunk=True),
    ]
    random.Random(3).shuffle(keys)
    admissions = [tracker.admit(k, None) for k in keys]
    assert all(isinstance(a, Accepted) and a.new for a in admissions)
    assert [a.completed for a in admissions if isinstance(a, Accepted)] == [False] * 3 + [True]
    transfer = tracker.open["r1"]
    assert transfer.complete
    assert transfer.missing() == []
    assert tracker.decide(transfer).action == "load"


def test_duplicates_count_once(tracker: TransferTracker) -> None:
    assert isinstance(tracker.admit(key(), None), Accepted)
    again = tracker.admit(key(), None)
    assert isinstance(again, Accepted)
    assert not again.new
    assert not again.completed
    assert tracker.open["r1"].chunks_received == 1


def test_missing_names_one_item_per_gap(tracker: TransferTracker) -> None:
    for number in (1, 4, 7):
        tracker.admit(key(chunk_number=number), None)
    transfer = tracker.open["r1"]
    assert transfer.missing() == [
        "stream 1 chunks 2-3",
        "stream 1 chunks 5-6",
        "stream 1 last chunk",
        "stream 2 last chunk",
    ]
    tracker.admit(key(chunk_number=8, is_last_chunk=True), None)
    assert transfer.missing()[:2] == ["stream 1 chunks 2-3", "stream 1 chunks 5-6"]
    progress = transfer.progress()
    assert (progress.chunks_received, progress.streams_complete, progress.stream_total) == (
        4,
        0,
        2,
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param({}, {"stream_number": 3}, id="stream beyond the total"),
        pytest.param({}, {"stream_number": 0}, id="stream zero"),
        pytest.param({}, {"chunk_number": 0}, id="chunk zero"),
        pytest.param(
            {"chunk_number": 2, "is_last_chunk": True},
            {"chunk_number": 3, "is_last_chunk": True},
            id="two last chunks",
        ),
        pytest.param(
            {"chunk_number": 2, "is_last_chunk": True},
            {"chunk_number": 3},
            id="a chunk beyond the last",
        ),
        pytest.param(
            {"chunk_number": 3},
            {"chunk_number": 2, "is_last_chunk": True},
            id="a last chunk below a chunk seen",
        ),
        pytest.param(
            {"chunk_number": 2, "is_last_chunk": True},
            {"chunk_number": 2},
            id="the last chunk again, not last",
        ),
        pytest.param({}, {"chunk_number": 2, "table_name": "stores"}, id="a stream, two tables"),
        pytest.param({}, {"stream_number": 2}, id="two streams, one table"),
        pytest.param({}, {"chunk_number": 2, "stream_total": 3}, id="streamTotal differs"),
        pytest.param({}, {"chunk_number": 2, "delta_date": day(3)}, id="deltaDate differs"),
        pytest.param({}, {"chunk_number": 2, "delta_num": 3}, id="deltaNum differs"),
    ],
)
def test_framing_rules_are_bad_chunk(
    tracker: TransferTracker, first: dict[str, object], second: dict[str, object]
) -> None:
    assert isinstance(tracker.admit(key(**first), None), Accepted)
    assert code_of(tracker.admit(key(**second), None)) is ErrorCode.BAD_CHUNK
    assert "r1" not in tracker.open
    assert isinstance(tracker.admit(key(chunk_number=5), None), Dropped)


def test_stream_total_below_one_is_bad_chunk(tracker: TransferTracker) -> None:
    assert code_of(tracker.admit(key(stream_total=0), None)) is ErrorCode.BAD_CHUNK


def test_an_undecodable_body_is_bad_chunk(tracker: TransferTracker) -> None:
    assert code_of(tracker.admit(key(), b"not avro")) is ErrorCode.BAD_CHUNK


def test_a_body_of_another_shape_is_schema_mismatch(
    tracker: TransferTracker, marketing: LogicalSchema
) -> None:
    stores_body = encode_body(marketing.table("stores"), [])
    assert code_of(tracker.admit(key(), stores_body)) is ErrorCode.SCHEMA_MISMATCH


def test_a_body_of_the_right_shape_is_accepted(
    tracker: TransferTracker, marketing: LogicalSchema
) -> None:
    body = encode_body(marketing.table("sales"), [(1, 0, "p", 1, 1, None, 0)])
    assert isinstance(tracker.admit(key(), body), Accepted)


def test_unknown_table(tracker: TransferTracker) -> None:
    assert code_of(tracker.admit(key(table_name="nope"), None)) is ErrorCode.UNKNOWN_TABLE


def test_unknown_datamart(tracker: TransferTracker) -> None:
    rejected = tracker.admit(key(datamart="other"), None)
    assert code_of(rejected) is ErrorCode.UNKNOWN_DATAMART


def test_a_delta_beyond_the_expected_is_out_of_sequence(tracker: TransferTracker) -> None:
    assert code_of(tracker.admit(key(delta_num=3), None)) is ErrorCode.OUT_OF_SEQUENCE


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"delta_num": 1, "delta_date": day(5)}, id="applied delta, other date"),
        pytest.param({"delta_date": day(1)}, id="new delta dated like the last"),
        pytest.param({"delta_date": day(0)}, id="new delta dated before the last"),
    ],
)
def test_delta_conflict(tracker: TransferTracker, changes: dict[str, object]) -> None:
    assert code_of(tracker.admit(key(**changes), None)) is ErrorCode.DELTA_CONFLICT


def test_an_applied_delta_with_its_date_is_answered_from_the_registry(
    tracker: TransferTracker,
) -> None:
    tracker.admit(key(delta_num=1, delta_date=day(1), is_last_chunk=True), None)
    last = key(
        delta_num=1, delta_date=day(1), stream_number=2, table_name="stores", is_last_chunk=True
    )
    admission = tracker.admit(last, None)
    assert isinstance(admission, Accepted)
    assert admission.completed
    assert tracker.decide(admission.transfer).action == "answer-stored"


def test_a_second_transfer_of_a_delta_applied_meanwhile(tracker: TransferTracker) -> None:
    for rid in ("a", "b"):
        tracker.admit(key(request_id=rid, is_last_chunk=True), None)
        tracker.admit(
            key(request_id=rid, stream_number=2, table_name="stores", is_last_chunk=True), None
        )
    tracker.record_applied("marketing", 2, day(2))
    assert tracker.expected("marketing") == 3
    assert tracker.decide(tracker.open["b"]).action == "answer-stored"


def test_a_redelivered_last_flag_after_a_restart_completes_the_stream(
    tracker: TransferTracker,
) -> None:
    # As rebuilt from staging when the crash fell between a body and its stream file.
    tracker.admit(key(chunk_number=1), None)
    tracker.open["r1"].streams[1].chunks.add(2)
    admission = tracker.admit(key(chunk_number=2, is_last_chunk=True), None)
    assert isinstance(admission, Accepted)
    assert (admission.new, admission.stream_changed) == (False, True)
    assert tracker.open["r1"].streams[1].last == 2


def test_a_finished_transfer_drops_its_chunks(tracker: TransferTracker) -> None:
    tracker.admit(key(), None)
    tracker.finish("r1")
    assert isinstance(tracker.admit(key(chunk_number=2), None), Dropped)


def test_one_value_holds_a_transfers_life(tracker: TransferTracker) -> None:
    first = tracker.admit(key(), None)
    assert isinstance(first, Accepted)
    assert first.opened
    transfer = first.transfer
    again = tracker.admit(key(chunk_number=2), None)
    assert isinstance(again, Accepted)
    assert not again.opened
    assert again.transfer is transfer
    assert transfer.phase is Phase.RECEIVING
    assert tracker.overdue(1e12) == []
    tracker.opened(transfer, 10.0, first_seen=0.0)
    assert tracker.overdue(9.9) == []
    assert tracker.overdue(10.0) == [transfer]
    tracker.reported_incomplete(transfer)  # answered: not overdue again until re-armed
    assert tracker.overdue(1e12) == []
    tracker.chunk_staged(transfer, 20.0)  # a new chunk re-arms it
    assert tracker.overdue(20.0) == [transfer]
    assert tracker.loading("marketing") is None
    tracker.load_started(transfer)
    assert tracker.loading("marketing") is transfer
    tracker.load_ended(transfer)
    assert tracker.loading("marketing") is None
    tracker.load_started(transfer)
    assert tracker.finish("r1") is transfer
    assert tracker.loading("marketing") is None


def test_a_complete_transfer_is_never_overdue(tracker: TransferTracker) -> None:
    for k in (
        key(chunk_number=1, is_last_chunk=True),
        key(stream_number=2, table_name="stores", is_last_chunk=True),
    ):
        admission = tracker.admit(k, None)
    assert isinstance(admission, Accepted)
    assert admission.completed
    tracker.opened(admission.transfer, 0.0, first_seen=0.0)
    assert tracker.overdue(1.0) == []


def test_a_delta_dated_beyond_the_clock_skew_is_bad_chunk(marketing: LogicalSchema) -> None:
    """A date of 9999-12-31, once applied, would make every real delta a DELTA_CONFLICT."""
    now = day(2) + timedelta(hours=3)
    tracker = TransferTracker(
        {"marketing": marketing}, {"marketing": {0: day(0), 1: day(1)}}, wall_clock=lambda: now
    )
    far = tracker.admit(key(request_id="far", delta_date=datetime(9999, 12, 31, tzinfo=UTC)), None)
    assert code_of(far) is ErrorCode.BAD_CHUNK
    assert isinstance(far, Rejected)
    assert "ahead of this replica's clock" in far.message
    ahead = key(request_id="ahead", delta_date=now + timedelta(days=1, seconds=1))
    assert code_of(tracker.admit(ahead, None)) is ErrorCode.BAD_CHUNK
    within = key(request_id="within", delta_date=now + timedelta(hours=23))
    assert isinstance(tracker.admit(within, None), Accepted)
    assert tracker.expected("marketing") == 2  # nothing of the refused ones was applied


def test_each_stream_complete_before_its_transfer_is_offered_to_prestaging_once(
    tracker: TransferTracker,
) -> None:
    tracker.admit(key(chunk_number=2, is_last_chunk=True), None)
    transfer = tracker.open["r1"]
    assert tracker.take_prestage(transfer) == {}  # chunk 1 of stream 1 is missing
    tracker.admit(key(chunk_number=1), None)
    assert tracker.take_prestage(transfer, min_bytes=0) == {1: Offer(ChunkRange(1, 2, True), 0)}
    assert tracker.take_prestage(transfer) == {}  # offered once
    tracker.admit(key(stream_number=2, table_name="stores", is_last_chunk=True), None)
    assert transfer.complete
    assert tracker.take_prestage(transfer) == {}  # complete: the load stages it


def test_a_stream_smaller_than_asked_is_left_to_the_load(tracker: TransferTracker) -> None:
    tracker.admit(key(is_last_chunk=True), None)
    transfer = tracker.open["r1"]
    transfer.streams[1].decoded_bytes = 100
    assert tracker.take_prestage(transfer, min_bytes=101) == {}
    assert tracker.take_prestage(transfer, min_bytes=0) == {}  # offered (and passed) once


def test_a_stream_still_arriving_is_offered_in_pieces_of_chunks_without_a_gap(
    tracker: TransferTracker,
) -> None:
    for chunk in (1, 2, 4):
        tracker.admit(key(chunk_number=chunk), None)
    transfer = tracker.open["r1"]
    transfer.streams[1].decoded_bytes = 300  # 100 a chunk
    assert tracker.take_prestage(transfer, piece_bytes=201) == {}  # 1-2: 200 bytes
    assert tracker.take_prestage(transfer, piece_bytes=200) == {
        1: Offer(ChunkRange(1, 2, False), 200)
    }
    assert tracker.take_prestage(transfer, piece_bytes=100) == {}  # 3 is missing
    tracker.admit(key(chunk_number=3), None)
    transfer.streams[1].decoded_bytes = 400
    assert tracker.take_prestage(transfer, piece_bytes=100) == {
        1: Offer(ChunkRange(3, 4, False), 200)
    }
    tracker.admit(key(chunk_number=5, is_last_chunk=True), None)
    transfer.streams[1].decoded_bytes = 500
    # complete: the chunks after the last piece, whatever their size
    assert tracker.take_prestage(transfer, min_bytes=10**6, piece_bytes=100) == {
        1: Offer(ChunkRange(5, 5, True), 100)
    }
    assert tracker.take_prestage(transfer, piece_bytes=1) == {}  # offered once


def test_a_recovered_stream_is_not_offered_in_pieces(tracker: TransferTracker) -> None:
    tracker.admit(key(chunk_number=1), None)
    transfer = tracker.open["r1"]
    transfer.streams[1].decoded_bytes = None  # as read back from disk: not measured
    assert tracker.take_prestage(transfer, piece_bytes=1) == {}
