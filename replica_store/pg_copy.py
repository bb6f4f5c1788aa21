"""PostgreSQL's binary COPY format, written from Arrow batches by a compiled kernel.

Binary COPY is exact for every replica type (float bits including NaN payloads and signed
zero, dates and timestamps far before year 1 or after 9999) and needs no text parsing on the
server. Columns arrive in their physical encodings: booleans, int32, int64, float32,
float64, strings, and dates (int32 days), times and timestamps (int64 microseconds) since
the Unix epoch. PostgreSQL counts dates and timestamps from 2000-01-01; the kernel shifts.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import pyarrow as pa

from protocol.schema import Table
from protocol.types import TypeKind

HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
TRAILER = (-1).to_bytes(2, "big", signed=True)

# Wire kinds (how many bytes, and what shift).
BOOL, INT4, INT8, FLOAT4, FLOAT8, TEXT, DATE, TIME, TIMESTAMP = range(9)
_WIDTH = np.array([1, 4, 8, 4, 8, 0, 4, 8, 8], dtype=np.int64)
_DAYS_1970_TO_2000 = 10_957
_MICROS_1970_TO_2000 = _DAYS_1970_TO_2000 * 86_400_000_000

_KIND = {
    TypeKind.BOOLEAN: BOOL,
    TypeKind.INT32: INT4,
    TypeKind.INT: INT8,
    TypeKind.BIGINT: INT8,
    TypeKind.FLOAT: FLOAT4,
    TypeKind.DOUBLE: FLOAT8,
    TypeKind.CHAR: TEXT,
    TypeKind.VARCHAR: TEXT,
    TypeKind.UUID: TEXT,
    TypeKind.LINK: TEXT,
    TypeKind.DATE: DATE,
    TypeKind.TIME: TIME,
    TypeKind.TIMESTAMP: TIMESTAMP,
}


def key_kinds(table: Table) -> np.ndarray:
    """Wire kinds of the primary key columns, in key order."""
    return np.array([_KIND[table.column(k).type.kind] for k in table.primary_key], dtype=np.int8)


def copy_kinds(table: Table) -> np.ndarray:
    """Wire kinds of the staging columns: the table's columns, then `sys_op` (int4)."""
    return np.array([*(_KIND[c.type.kind] for c in table.columns), INT4], dtype=np.int8)


@numba.njit(cache=True, nogil=True)
def _put(out: Any, pos: int, value: int, width: int) -> int:
    for i in range(width):
        out[pos + i] = (value >> (8 * (width - 1 - i))) & 0xFF
    return pos + width


@numba.njit(cache=True, nogil=True)
def encode_rows(
    kinds: Any,
    values: Any,
    valid: Any,
    starts: Any,
    lengths: Any,
    text: Any,
    out: Any,
    row_ends: Any,
) -> int:
    """Write every row into `out`, and where each row ends into `row_ends`; returns the bytes
    written."""
    ncols = kinds.shape[0]
    nrows = values.shape[1]
    pos = 0
    for r in range(nrows):
        pos = _put(out, pos, ncols, 2)
        for c in range(ncols):
            if valid[c, r] == 0:
                pos = _put(out, pos, -1, 4)
                continue
            kind = kinds[c]
            if kind == TEXT:
                size = lengths[c, r]
                pos = _put(out, pos, size, 4)
                start = starts[c, r]
                out[pos : pos + size] = text[start : start + size]
                pos += size
                continue
            width = _WIDTH[kind]
            value = values[c, r]
            if kind == DATE:
                value -= _DAYS_1970_TO_2000
            elif kind == TIMESTAMP:
                value -= _MICROS_1970_TO_2000
            pos = _put(out, pos, width, 4)
            pos = _put(out, pos, value, width)
        row_ends[r] = pos
    return pos


def _column_arrays(array: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """(values as int64 bit patterns, validity) of a fixed-width Arrow column."""
    n = len(array)
    valid = None
    if array.null_count:
        valid = np.asarray(array.is_valid()).astype(np.uint8)
    if pa.types.is_boolean(array.type):
        return np.asarray(array.fill_null(False)).astype(np.int64), valid
    width = array.type.bit_width // 8
    raw = np.frombuffer(array.buffers()[1], dtype=f"<i{width}", count=n + array.offset)
    return raw[array.offset :].astype(np.int64), valid


def encode_tuples(kinds: np.ndarray, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    """The rows of `batch` as binary COPY tuples: (bytes, where each row ends)."""
    ncols = len(kinds)
    nrows = batch.num_rows
    values = np.zeros((ncols, nrows), dtype=np.int64)
    valid = np.ones((ncols, nrows), dtype=np.uint8)
    starts = np.zeros((ncols, nrows), dtype=np.int64)
    lengths = np.zeros((ncols, nrows), dtype=np.int64)
    texts: list[np.ndarray] = []
    base = 0
    size = nrows * (2 + 4 * ncols)
    for c in range(ncols):
        array = batch.column(c)
        if kinds[c] == TEXT:
            array = array.cast(pa.large_string())
            if array.null_count:
                valid[c] = np.asarray(array.is_valid()).astype(np.uint8)
            offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[
                array.offset : array.offset + nrows + 1
            ]
            data = array.buffers()[2]
            chunk = (
                np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
            )
            starts[c] = offsets[:-1] + base
            lengths[c] = np.diff(offsets) * valid[c]
            texts.append(chunk)
            base += chunk.shape[0]
            size += int(lengths[c].sum())
        else:
            values[c], col_valid = _column_arrays(array)
            if col_valid is not None:
                valid[c] = col_valid
            size += int((valid[c].astype(np.int64) * int(_WIDTH[kinds[c]])).sum())
    text = np.concatenate(texts) if texts else np.zeros(0, dtype=np.uint8)
    out = np.empty(size, dtype=np.uint8)
    row_ends = np.empty(nrows, dtype=np.int64)
    written = encode_rows(kinds, values, valid, starts, lengths, text, out, row_ends)
    if written != size:
        raise AssertionError(f"binary COPY size {written} != {size}")
    return out, row_ends


def encode_batch(kinds: np.ndarray, batch: pa.RecordBatch) -> bytes:
    """The rows of `batch` in binary COPY tuple format (no header, no trailer)."""
    return encode_tuples(kinds, batch)[0].tobytes()


def tuples_array(kinds: np.ndarray, batch: pa.RecordBatch) -> pa.Array:
    """One Arrow binary value per row: its binary COPY tuple."""
    data, row_ends = encode_tuples(kinds, batch)
    if data.shape[0] > 2**31 - 1:
        raise ValueError("a batch encodes to more than 2 GiB")
    offsets = np.zeros(batch.num_rows + 1, dtype=np.int32)
    offsets[1:] = row_ends
    return pa.Array.from_buffers(
        pa.binary(), batch.num_rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
