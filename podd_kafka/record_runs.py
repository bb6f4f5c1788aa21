"""A partition's records handed out a Kafka batch at a time, made into `ConsumerRecord`s
only where a reader asks for one.

aiokafka makes a `ConsumerRecord` (eleven fields) of every record a consumer reads, in a
Python generator, which costs about twice what reading the batch costs: 3.2 µs a message
against 1.0 for the batch's own records (a 558-byte message, 8,000 of them). A reader that
takes a partition's values and offsets in bulk (the CDC origin's batch read) needs none of
them, nor the batch's own records. A consumer made with `value_deserializer=RUNS` gets from
`getmany` pieces of at most `MOST_IN_A_LIST` records, control batches and the records before
the fetch offset left out as aiokafka leaves them out: the plain v2 batches' records read
by a compiled kernel across batches, as `RecordColumns` (the fetch's bytes and where each
record's fields are: `podd_kafka.fetch_columns`), any other batch's as the batch guard reads
it (`podd_kafka.batch_guard`: a compressed one decompressed within its bound, then read by
the same kernel; an older format's as a list of aiokafka's records). Each record has
`offset`, `timestamp`, `timestamp_type`, `key`, `value`, `headers`. `getmany`'s
`max_records` then counts those pieces. `Records` holds such pieces of one
partition, `RecordRun` a partition's run of them as a sequence of `ConsumerRecord`s, each
made when it is taken, and hands its values on in bulk.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import Any, overload

import numpy as np
from aiokafka import ConsumerRecord
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from podd_kafka.fetch_columns import Piece, fetch_pieces
from podd_kafka.record_columns import RecordColumns


class _Runs:
    """The marker `value_deserializer` of a consumer that takes its records a batch at a
    time; called as a deserializer (it is never, in that mode), it hands the value on."""

    def __call__(self, value: bytes | None) -> bytes | None:
        return value

    def __repr__(self) -> str:
        return "RUNS"


RUNS = _Runs()


#: The most records in one piece: more come as several pieces, so that a fetch or a batch of
#: many small records (a compressed one may inflate to `max_batch_decoded_mib`) never has
#: them all read into lines, or made, at once.
MOST_IN_A_LIST = 2000
#: Values a batch of `run_of_values`: about a producer's default batch (16 KiB) of CDC messages.
BATCH_OF_VALUES = 20


def unpack_runs(partition_records: Any) -> Iterator[Sequence[Any]]:
    """What `PartitionRecords._unpack_records` yields for a `RUNS` consumer: the fetch's
    records at or past the fetch offset, in pieces of at most `MOST_IN_A_LIST`
    (`_GuardedRecords.pieces`: the plain v2 batches' read by a kernel, as `RecordColumns`,
    across batches; none of a control batch), `next_fetch_offset` moved past each piece as
    aiokafka moves it past each record, and past a batch at its end. A read-committed
    consumer has no such mode (aborted transactions are left out record by record there)."""
    if partition_records._isolation_level != 0:
        raise ValueError("a consumer reading record runs must read uncommitted records")
    start = partition_records.next_fetch_offset
    for piece, after in partition_records._records.pieces(
        MOST_IN_A_LIST, partition_records._check_crcs
    ):
        partition_records.next_fetch_offset = after
        if piece is None:
            continue
        found = from_offset(piece, start) if offsets_of(piece)[0] < start else piece
        if len(found):  # none: all before the fetch offset (a fetch inside the batch)
            yield found


def offsets_of(piece: Sequence[Any]) -> Any:
    """The offsets of a piece of records (`RecordColumns`' as an array)."""
    if isinstance(piece, RecordColumns):
        return piece.offsets()
    return [record.offset for record in piece]


def values_of(piece: Sequence[Any]) -> list[bytes | None]:
    """The values of a piece of records (`RecordColumns`' with no record made)."""
    if isinstance(piece, RecordColumns):
        return piece.values()
    return [record.value for record in piece]


def from_offset(piece: Sequence[Any], first: int) -> Sequence[Any]:
    """The records of `piece` at or past offset `first`."""
    if isinstance(piece, RecordColumns):
        return piece.from_offset(first)
    return [record for record in piece if record.offset >= first]


class Records(Sequence[Any]):
    """Records of one partition in offset order, held as the pieces a `RUNS` consumer gave
    (`RecordColumns`, lists of records): taken and sliced without a record being made."""

    __slots__ = ("_ends", "pieces")

    def __init__(self, pieces: Iterable[Sequence[Any]] = ()) -> None:
        self.pieces: list[Sequence[Any]] = []
        self._ends: list[int] = []
        for piece in pieces:
            self.add(piece)

    def add(self, piece: Sequence[Any]) -> None:
        if len(piece):
            self._ends.append(len(self) + len(piece))
            self.pieces.append(piece)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> Records: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return self._sliced(*index.indices(len(self)))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("record index out of range")
        k = bisect_right(self._ends, index)
        return self.pieces[k][index - (self._ends[k - 1] if k else 0)]

    def _sliced(self, start: int, stop: int, step: int) -> Records:
        if step != 1:
            raise ValueError("records are sliced in order, a step of 1")
        found, before = Records(), 0
        for piece, end in zip(self.pieces, self._ends, strict=True):
            if end > start and before < stop:
                found.add(piece[max(0, start - before) : min(len(piece), stop - before)])
            before = end
        return found

    def __iter__(self) -> Iterator[Any]:
        return chain.from_iterable(self.pieces)

    def offsets(self) -> Any:
        """Every record's offset, as an array."""
        if not self.pieces:
            return np.zeros(0, np.int64)
        return np.concatenate([np.asarray(offsets_of(p), np.int64) for p in self.pieces])

    def last_offset(self) -> int:
        return int(offsets_of(self.pieces[-1])[-1])


class RecordRun(Sequence[ConsumerRecord[Any, Any]]):
    """Records of one partition in offset order (`records`: as the batch decoder made them,
    or `Records`); indexing makes a `ConsumerRecord`, slicing another `RecordRun`."""

    __slots__ = ("partition", "records", "topic")

    def __init__(self, topic: str, partition: int, records: Sequence[Any]) -> None:
        self.topic = topic
        self.partition = partition
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    @overload
    def __getitem__(self, index: int) -> ConsumerRecord[Any, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> RecordRun: ...

    def __getitem__(self, index: int | slice) -> ConsumerRecord[Any, Any] | RecordRun:
        if isinstance(index, slice):
            return RecordRun(self.topic, self.partition, self.records[index])
        return self._made(self.records[index])

    def __iter__(self) -> Iterator[ConsumerRecord[Any, Any]]:
        return map(self._made, self.records)

    def values(self) -> list[bytes | None]:
        return [value for piece in self._pieces() for value in values_of(piece)]

    def offsets(self) -> list[int]:
        return list(self.offset_array().tolist())

    def offset_array(self) -> Any:
        """Every record's offset, as an int64 array."""
        if isinstance(self.records, Records):
            return self.records.offsets()
        return np.fromiter((r.offset for r in self.records), np.int64, len(self.records))

    def value_pieces(self) -> list[Sequence[Any]]:
        """The run's values as `record_columns.values_at` takes them: its `RecordColumns`
        as they are, any other records' values in a list."""
        return [
            piece if isinstance(piece, RecordColumns) else values_of(piece)
            for piece in self._pieces()
        ]

    def _pieces(self) -> list[Sequence[Any]]:
        return self.records.pieces if isinstance(self.records, Records) else [self.records]

    def _made(self, record: Any) -> ConsumerRecord[Any, Any]:
        key, value = record.key, record.value
        return ConsumerRecord(
            self.topic,
            self.partition,
            record.offset,
            record.timestamp,
            record.timestamp_type,
            key,
            value,
            record.checksum,
            -1 if key is None else len(key),
            -1 if value is None else len(value),
            tuple(record.headers),
        )


def run_of_values(
    topic: str, partition: int, values: Iterable[bytes | None], first: int = 0
) -> RecordRun:
    """`values` as one partition's run from offset `first`, read as a fetch is read: v2
    record batches of `BATCH_OF_VALUES` (built by aiokafka's builder, timestamps 0, no key)
    one after another, read by `fetch_columns.fetch_pieces`. For the warm-up, the benches
    and tests, which feed a reader's steps without a broker."""
    batches, values = [], list(values)
    for at in range(0, len(values), BATCH_OF_VALUES):
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, batch_size=2**31 - 1)
        for offset, value in enumerate(values[at : at + BATCH_OF_VALUES]):
            builder.append(offset, timestamp=0, key=None, value=value, headers=[])
        batch = bytearray(builder.build())
        struct.pack_into(">q", batch, 0, first + at)  # the base offset, as the broker sets it
        batches.append(bytes(batch))
    data = np.frombuffer(b"".join(batches), np.uint8)

    def other(start: int, end: int) -> Iterator[Piece]:
        raise RuntimeError(f"a batch built of values is not plain: {start}..{end}")

    def refused(start: int, end: int, reason: str) -> None:
        raise RuntimeError(f"a batch built of values was refused: {reason}")

    pieces = fetch_pieces(data, MOST_IN_A_LIST, True, other, refused)
    return RecordRun(topic, partition, Records(piece for piece, _ in pieces if piece is not None))
