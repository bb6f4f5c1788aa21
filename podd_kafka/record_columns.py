"""Records of Kafka record batches (format v2) as columns over the bytes they came in, made
into records only where a reader asks for one.

A `RecordColumns` holds the bytes (a fetch answer's, or a batch's decompressed) and a line a
record of where the kernel found its fields (`podd_kafka.record_kernel`; a fetch is read so
by `podd_kafka.fetch_columns`). It is a sequence of records as aiokafka's batch reader makes
them (`offset`, `timestamp`, `timestamp_type`, `key`, `value`, `headers`, `checksum`), each
made when it is taken; `values_at` hands a batch reader the values' bytes and where each is,
copied once, with nothing made.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from podd_kafka import record_kernel as kernel

#: Values a batch reader takes: a uint8 buffer, and where each value starts and ends in it.
JoinedValues = tuple[Any, Any, Any]


class RecordError(ValueError):
    """A record of a batch that cannot be read (the text says why)."""


class BatchRecord:
    """A record as aiokafka's batch reader makes one (v2: no checksum)."""

    __slots__ = ("headers", "key", "offset", "timestamp", "timestamp_type", "value")
    checksum = None

    def __init__(
        self,
        offset: int,
        timestamp: int,
        timestamp_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]],
    ) -> None:
        self.offset, self.timestamp, self.timestamp_type = offset, timestamp, timestamp_type
        self.key, self.value, self.headers = key, value, headers


class RecordColumns(Sequence[BatchRecord]):
    """Records of a fetch: `data`, the bytes they are in (a fetch answer's, or a batch's
    decompressed), and a line of `record_kernel.COLUMNS` a record."""

    __slots__ = ("data", "lines")

    def __init__(self, data: Any, lines: Any) -> None:
        self.data, self.lines = data, lines

    def __len__(self) -> int:
        return len(self.lines)

    @overload
    def __getitem__(self, index: int) -> BatchRecord: ...

    @overload
    def __getitem__(self, index: slice) -> RecordColumns: ...

    def __getitem__(self, index: int | slice) -> BatchRecord | RecordColumns:
        if isinstance(index, slice):
            return RecordColumns(self.data, self.lines[index])
        return self._made(self.lines[index].tolist())

    def __iter__(self) -> Iterator[BatchRecord]:
        return map(self._made, self.lines.tolist())

    def offsets(self) -> Any:
        return self.lines[:, kernel.R_OFFSET]

    def values(self) -> list[bytes | None]:
        """Every record's value, with no record made."""
        k = kernel
        spans = self.lines[:, k.R_VALUE0 : k.R_VALUE1 + 1].tolist()
        return [self._bytes(start, end) for start, end in spans]

    def from_offset(self, first: int) -> RecordColumns:
        """The records at or past offset `first`."""
        return RecordColumns(self.data, self.lines[self.offsets() >= first])

    def _made(self, line: list[int]) -> BatchRecord:
        k = kernel
        return BatchRecord(
            line[k.R_OFFSET],
            line[k.R_TIMESTAMP],
            line[k.R_TYPE],
            self._bytes(line[k.R_KEY0], line[k.R_KEY1]),
            self._bytes(line[k.R_VALUE0], line[k.R_VALUE1]),
            self._headers(line[k.R_HEADERS0], line[k.R_HEADER_COUNT]),
        )

    def _bytes(self, start: int, end: int) -> bytes | None:
        return None if start < 0 else self.data[start:end].tobytes()

    def _headers(self, at: int, count: int) -> list[tuple[str, bytes | None]]:
        """The headers the kernel found at `at` (it checked every bound)."""
        found = []
        for _ in range(count):
            size, at = _varint(self.data, at)
            key = self.data[at : at + size].tobytes().decode()
            size, at = _varint(self.data, at + size)
            found.append((key, None if size < 0 else self.data[at : at + size].tobytes()))
            at += max(size, 0)
        return found


def _varint(data: Any, at: int) -> tuple[int, int]:
    """A zigzag varint the kernel has read already: its value and where it ends."""
    value = shift = 0
    while True:
        byte = int(data[at])
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at


def values_at(pieces: Sequence[Any]) -> JoinedValues:
    """The values of `pieces` (each a `RecordColumns`, or a list of values) for a batch
    reader: one buffer, and where each value starts and ends in it (a null value empty). A
    `RecordColumns`' values are copied once, as the span of its bytes they are in."""
    spans, starts, ends, size = [], [], [], 0
    for piece in pieces:
        if isinstance(piece, RecordColumns):
            first, last = piece.lines[:, kernel.R_VALUE0], piece.lines[:, kernel.R_VALUE1]
            there = first >= 0
            low = int(first[there].min()) if there.any() else 0
            high = int(last.max()) if there.any() else 0
            spans.append(piece.data[low:high])
            starts.append(np.where(there, first - low + size, size))
            ends.append(np.where(there, last - low + size, size))
            size += high - low
            continue
        values = [value or b"" for value in piece]
        lengths = np.fromiter(map(len, values), np.int64, len(values))
        joined = np.frombuffer(b"".join(values), np.uint8)
        spans.append(joined)
        piece_ends = np.cumsum(lengths) + size
        starts.append(piece_ends - lengths)
        ends.append(piece_ends)
        size += len(joined)
    if not spans:
        empty = np.zeros(0, np.int64)
        return np.zeros(0, np.uint8), empty, empty
    return np.concatenate(spans), np.concatenate(starts), np.concatenate(ends)


def first_bad_key(piece: RecordColumns) -> int | None:
    """The first record of `piece` whose header keys are not all UTF-8, or None (only the
    records the kernel marked, with a header key past ASCII, are decoded)."""
    for k in np.nonzero(piece.lines[:, kernel.R_WIDE])[0].tolist():
        try:
            piece[k]
        except UnicodeDecodeError:
            return int(k)
    return None
