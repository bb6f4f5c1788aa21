"""A fetch's records read into columns (`podd_kafka.fetch_columns`, `record_columns`) against
aiokafka's own batch reader, offline: every field of every record in every codec, the same
records and the same refusal on each byte of a batch changed, hostile counts and lengths
refused within the batch's bytes, and a fetch of several batches read across them."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.forges import raw_batches as rb
from podd_kafka.fetch_columns import (
    FRAMES_AT_ONCE,
    batch_columns,
    fetch_pieces,
    v2_crc_matches,
)
from podd_kafka.record_columns import RecordColumns, RecordError, values_at
from podd_kafka.record_runs import Records

_ATTRIBUTES_AT = 21
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]

records_st = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)), max_size=3),
    ),
    min_size=1,
    max_size=40,
)


def built(records: Sequence[Record], codec: int = 0, base: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, batch_size=2**24)
    for k, (key, value, headers) in enumerate(records):
        stamp = 1_700_000_000_000 + 7 * k
        builder.append(k, timestamp=stamp, key=key, value=value, headers=headers)
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, base)
    return bytes(batch)


def fields(record: Any) -> tuple[Any, ...]:
    return (
        record.offset,
        record.timestamp,
        record.timestamp_type,
        record.key,
        record.value,
        [tuple(h) for h in record.headers],
        record.checksum,
    )


def theirs(batch: bytes) -> tuple[list[tuple[Any, ...]], bool]:
    """aiokafka's records of `batch`, and whether it refused the batch after them."""
    found = []
    try:
        for record in DefaultRecordBatch(batch):
            found.append(fields(record))
    except Exception:
        return found, True
    return found, False


def read_fetch(
    fetch: bytes, most: int = 7, check_crcs: bool = False
) -> tuple[list[tuple[Any, ...]], list[int], list[int]]:
    """Our records of the fetch bytes `fetch` (a compressed batch read by `batch_columns`,
    as the batch guard reads one), the batches refused (by where they start), and the
    position after each piece."""
    data = np.frombuffer(fetch, np.uint8)
    found: list[tuple[Any, ...]] = []
    refused: list[int] = []
    after: list[int] = []

    def other(start: int, end: int) -> Any:
        if check_crcs and not v2_crc_matches(data, start, end):
            refused.append(start)
            return
        try:
            for piece in batch_columns(data, start, end, most, 2**24):
                yield piece, -1
        except RecordError:
            refused.append(start)

    def refuse(start: int, end: int, reason: str) -> None:
        assert reason
        refused.append(start)

    pieces: Any = fetch_pieces(data, most, check_crcs, other, refuse)
    for piece, position in pieces:
        after.append(position)
        if piece is not None:
            assert 0 < len(piece) <= most
            found += [fields(record) for record in piece]
    return found, refused, after


def ours(batch: bytes, most: int = 7) -> tuple[list[tuple[Any, ...]], bool]:
    found, refused, _ = read_fetch(batch, most)
    return found, bool(refused)


@settings(max_examples=60, deadline=None)
@given(records_st, st.sampled_from([0, 1, 2, 3, 4]), st.integers(0, 2**40))
def test_every_field_is_aiokafkas_in_every_codec(
    records: list[Record], codec: int, base: int
) -> None:
    batch = built(records, codec, base)
    assert ours(batch) == theirs(batch)
    assert not ours(batch)[1]


def test_a_log_append_time_batch_gives_each_record_the_batchs_max_timestamp() -> None:
    batch = bytearray(built([(b"k", b"v", []), (None, b"w", [])]))
    (attributes,) = struct.unpack_from(">h", batch, _ATTRIBUTES_AT)
    struct.pack_into(">h", batch, _ATTRIBUTES_AT, attributes | 0x08)
    found, refused = ours(bytes(batch))
    assert (found, refused) == theirs(bytes(batch))
    assert {record[1] for record in found} == {1_700_000_000_007}
    assert found[0][2] == 1


def test_each_byte_changed_gives_aiokafkas_records_and_refusal() -> None:
    """Every byte of the records' part changed to a few values: the records read before the
    first that breaks a rule are aiokafka's, and the batch is refused where aiokafka refuses
    it (the header's count included, which is at 57)."""
    records: list[Record] = [
        (b"key", b"value" * 3, [("h", b"1"), ("\u00e9t\u00e9", None)]),
        (None, None, []),
        (b"", b"x" * 200, [("k", b"")]),
    ]
    batch = built(records)
    for at in range(57, len(batch)):
        for new in (0x00, 0x01, 0x7F, 0x80, 0xFF, batch[at] ^ 0x02, 0xC3):
            changed = batch[:at] + bytes([new]) + batch[at + 1 :]
            assert ours(changed) == theirs(changed), (at, new)


def test_hostile_counts_and_lengths_are_refused_within_the_batch() -> None:
    batch = bytearray(built([(b"k", b"v", [])]))
    struct.pack_into(">i", batch, 57, 2**31 - 1)  # a count far past the records there
    found, refused = ours(bytes(batch))
    assert refused
    assert len(found) == 1
    cut = sized(built([(b"k", b"v" * 50, [])])[:-20])  # a value running past the batch's end
    assert ours(cut) == ([], True)
    assert ours(sized(cut[:40])) == ([], True)  # shorter than a v2 header
    garbage = sized(built([(b"k", b"v", [])])[:61] + b"\xff" * 30)  # varints of 11+ bytes
    assert ours(garbage) == ([], True)
    assert ours(cut) == theirs(cut)
    assert ours(garbage) == theirs(garbage)


def sized(batch: bytes) -> bytes:
    """`batch` with its length field made its size again (after it was cut or extended)."""
    return batch[:8] + struct.pack(">i", len(batch) - 12) + batch[12:]


def test_a_batch_of_a_header_key_not_utf8_ends_at_that_record() -> None:
    records: list[Record] = [(b"a", b"1", []), (b"b", b"2", [("ok", b"")]), (b"c", b"3", [])]
    batch = bytearray(built(records))
    at = batch.index(b"ok")
    batch[at] = 0xC3  # a lead byte followed by "k": not UTF-8
    found, refused = ours(bytes(batch), most=2)
    assert refused
    assert [record[3] for record in found] == [b"a"]
    assert (found, refused) == theirs(bytes(batch))


def test_a_fetch_of_batches_is_read_across_them_as_aiokafka_reads_each() -> None:
    """Plain batches one after another, a compressed one among them, a batch with a broken
    record, one with a wrong CRC, and a batch cut short at the fetch's end: every batch's
    records as aiokafka reads it, the broken and the wrong ones refused, the cut one left."""
    values: list[list[Record]] = [
        [(None, f"{b}-{n}".encode(), []) for n in range(5)] for b in range(6)
    ]
    batches = [built(values[b], 0 if b != 1 else 1, base=5 * b) for b in range(6)]
    broken = rb.records_of(batches[2])[:-1] + b"\x01"  # the last record's header count: -1
    batches[2] = rb.with_payload(batches[2], "none", broken)  # its CRC right
    batches[3] = rb.bad_crc(batches[3])
    fetch = b"".join(batches[:5]) + batches[5][:-10]
    found, refused, after = read_fetch(fetch, most=3, check_crcs=True)
    expected = [*theirs(batches[0])[0], *theirs(batches[1])[0], *theirs(batches[2])[0]]
    expected += theirs(batches[4])[0]
    assert theirs(batches[2])[1]  # aiokafka refuses the broken one too, after its first records
    assert found == expected
    starts = np.cumsum([0, *map(len, batches[:5])]).tolist()
    assert refused == [starts[2], starts[3]]
    moved = [position for position in after if position >= 0]  # (-1: this test's `other`)
    assert moved == sorted(moved)  # the position only moves on
    assert moved[-1] == 25  # past the last whole batch; the one cut short is not read


def test_the_records_of_tiny_batches_come_in_pieces_of_at_most_most() -> None:
    batches = [built([(b"k", f"{b}".encode(), [])], base=b) for b in range(50)]
    found, refused, after = read_fetch(b"".join(batches), most=8, check_crcs=True)
    assert [record[4] for record in found] == [f"{b}".encode() for b in range(50)]
    assert not refused
    assert after == [8, 16, 24, 32, 40, 48, 50]


def test_a_fetch_of_more_batches_than_are_framed_at_once_is_read_whole() -> None:
    count = FRAMES_AT_ONCE + 300
    batches = [built([(None, f"{b}".encode(), [])], base=b) for b in range(count)]
    found, refused, after = read_fetch(b"".join(batches), most=500, check_crcs=True)
    assert [record[0] for record in found] == list(range(count))
    assert not refused
    assert after[-1] == count


def test_a_compressed_batch_past_the_bound_is_refused_before_any_record() -> None:
    batch = rb.compressed(built([(b"k", b"v" * 5000, [])]), "zstd")
    with pytest.raises(RecordError, match="more than 1000"):
        list(batch_columns(np.frombuffer(batch, np.uint8), 0, len(batch), 10, 1000))


def test_values_at_joins_columns_and_values_with_nulls_empty() -> None:
    batch = built([(b"k", b"abc", []), (None, None, []), (b"k", b"", []), (None, b"defg", [])])
    (piece,) = batch_columns(np.frombuffer(batch, np.uint8), 0, len(batch), 10, 2**20)
    buf, starts, ends = values_at([piece[1:], [b"xy", None], piece[:1]])
    got = [buf[s:e].tobytes() for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
    assert got == [b"", b"", b"defg", b"xy", b"", b"abc"]


def test_records_slice_and_index_across_pieces_as_a_list_does() -> None:
    batch = built([(None, f"{n}".encode(), []) for n in range(10)], base=100)
    pieces = list(batch_columns(np.frombuffer(batch, np.uint8), 0, len(batch), 4, 2**20))
    assert [len(p) for p in pieces] == [4, 4, 2]
    assert isinstance(pieces[0], RecordColumns)
    records = Records([pieces[0], [], pieces[1], list(pieces[2])])
    values = [record.value for record in records]
    assert values == [f"{n}".encode() for n in range(10)]
    assert records.offsets().tolist() == list(range(100, 110))
    assert records.last_offset() == 109
    for start, stop in [(0, 10), (3, 9), (4, 8), (9, 20), (5, 5), (-3, None)]:
        sliced = records[start:stop]
        assert [r.value for r in sliced] == values[start:stop]
    assert records[-1].value == b"9"
    assert records[5].offset == 105
    with pytest.raises(IndexError):
        records[10]
