"""A compiled writer of `delta.in` bodies: rows → Avro binary records in an OCF.

fastavro's writer builds a dict per row and resolves each `["null", T]` union by looking at the
value, which held the origins to about 13 µs a row (measured on the CDC bench's rows; framing
was a fifth of the CDC origin's time). Here a chunk's columns go to Arrow arrays (C), and a
numba kernel (compiled once, cached on disk) writes the records from their buffers: about
4 µs a row with deflate, most of it Arrow's conversion and the compression.

It takes only plain values (`None` or the column's own Python type: bool, int, float, str,
date, time, datetime); `fast_body` returns None for anything else, and the caller writes that
chunk with fastavro, which also says what is wrong with a bad value. The records are the bytes
fastavro writes for the same rows (tests hold the two equal).
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Callable, Sequence
from datetime import date, datetime, time
from typing import Any

import cramjam
import numba
import numpy as np
import pyarrow as pa
import zstandard

from protocol import avro_kernel, kernel_arrays
from protocol.avro_kernel import (
    KIND_BOOLEAN,
    KIND_DOUBLE,
    KIND_FLOAT,
    KIND_INT,
    KIND_LONG,
    KIND_STRING,
)
from protocol.kernel_arrays import unowned
from protocol.kernel_cache import drop_if_sources_changed
from protocol.ocf import OCF_MAGIC, SYNC_SIZE
from protocol.schema import Table
from protocol.types import TypeKind

_KINDS = {
    "boolean": KIND_BOOLEAN,
    "int": KIND_INT,
    "long": KIND_LONG,
    "float": KIND_FLOAT,
    "double": KIND_DOUBLE,
    "string": KIND_STRING,
}
_PLAIN_TYPES: dict[TypeKind, type] = {
    TypeKind.BOOLEAN: bool,
    TypeKind.INT32: int,
    TypeKind.INT: int,
    TypeKind.BIGINT: int,
    TypeKind.FLOAT: float,
    TypeKind.DOUBLE: float,
    TypeKind.DATE: date,
    TypeKind.TIME: time,
    TypeKind.TIMESTAMP: datetime,
}
_NONE = type(None)
#: Level of `deflate` bodies: level 1 compresses a CDC chunk at about three times the speed
#: of zlib's default 6, for a body about a tenth larger.
DEFLATE_LEVEL = 1
#: A block closes once it holds this many bytes (fastavro's `sync_interval`).
BLOCK_BYTES = 16_000


@numba.njit(cache=True, nogil=True)
def _write_long(out: Any, pos: int, value: int) -> int:
    z = np.uint64((value << 1) ^ (value >> 63))
    while z >= np.uint64(0x80):
        out[pos] = np.uint8((z & np.uint64(0x7F)) | np.uint64(0x80))
        z >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(z)
    return pos + 1


@numba.njit(cache=True, nogil=True)
def encode_records(
    kinds: Any,
    nullable: Any,
    values: Any,
    lengths: Any,
    valid: Any,
    given_strings: Any,
    given_out: Any,
    ends: Any,
) -> int:
    """Write `values.shape[1]` records into `given_out`; the bytes written (`ends[r]`: where
    record `r` ends).

    The layout is `avro_kernel.decode_records`'s: values[c, r] an integer, raw float bits, or
    (strings) an offset into `given_strings`; lengths[c, r] a string's size; valid[c, r] 0 for
    null. `given_out` must hold the worst case: 11 bytes a field, plus every string's bytes.
    The writer works on both `unowned` (`protocol.kernel_arrays`): it passes `out` to a step
    per value and copies a slice of each per string."""
    out, strings = unowned(given_out), unowned(given_strings)
    pos = 0
    ncols, nrows = values.shape
    for r in range(nrows):
        for c in range(ncols):
            if nullable[c]:
                if valid[c, r] == 0:
                    out[pos] = 0  # branch 0: null
                    pos += 1
                    continue
                out[pos] = 2  # branch 1, zigzag
                pos += 1
            kind = kinds[c]
            if kind == KIND_LONG or kind == KIND_INT:
                pos = _write_long(out, pos, values[c, r])
            elif kind == KIND_STRING:
                size = lengths[c, r]
                pos = _write_long(out, pos, size)
                start = values[c, r]
                out[pos : pos + size] = strings[start : start + size]
                pos += size
            elif kind == KIND_BOOLEAN:
                out[pos] = 1 if values[c, r] != 0 else 0
                pos += 1
            else:
                width = 4 if kind == KIND_FLOAT else 8
                bits = np.uint64(values[c, r])
                for k in range(width):
                    out[pos + k] = np.uint8((bits >> np.uint64(8 * k)) & np.uint64(0xFF))
                pos += width
        ends[r] = pos
    return pos


# The writer reads `protocol.avro_kernel`'s kind numbers as constants, baked into its cached
# machine code, and inlines `protocol.kernel_arrays`: its cache must follow those files too.
drop_if_sources_changed([encode_records], [__file__, avro_kernel.__file__, kernel_arrays.__file__])


def _column(values: tuple[Any, ...], arrow: pa.DataType) -> tuple[Any, Any, Any, Any]:
    """One column as (values, lengths, valid, string bytes or None), or raises."""
    array = pa.array(values, type=arrow)
    n = len(array)
    valid = array.is_valid().to_numpy(zero_copy_only=False).astype(np.uint8)
    if pa.types.is_string(arrow):
        _, offsets_buf, data_buf = array.buffers()
        offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1).astype(np.int64)
        data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        return offsets[:-1], np.diff(offsets), valid, data
    if pa.types.is_boolean(arrow):
        array = array.cast(pa.int8())
    # Integers as they are; floats as their raw bits (float32 unsigned, so no sign spreads).
    dtype: Any = {8: np.int8, 32: np.int32, 64: np.int64}[array.type.bit_width]
    if pa.types.is_floating(arrow):
        dtype = np.uint32 if arrow.bit_width == 32 else np.int64
    data_buf = array.buffers()[1]
    raw = np.frombuffer(data_buf, dtype=dtype, count=n) if n else np.zeros(0, dtype)
    return raw.astype(np.int64), None, valid, None


def fast_body(
    table: Table, rows: Sequence[Any], schema: dict[str, Any], codec: str, nullable: list[bool]
) -> bytes | None:
    """The OCF of `rows` under the writer `schema`, or None if a value is not plain."""
    found = fast_records(table, rows, nullable)
    return None if found is None else container(schema, codec, *found)


def fast_records(table: Table, rows: Sequence[Any], nullable: list[bool]) -> tuple[Any, Any] | None:
    """The records of `rows` (fields nullable as `nullable` says) and where each ends, or
    None if a value is not plain (or there are no rows)."""
    width = len(table.columns) + 1
    if not rows or set(map(len, rows)) != {width}:
        return None
    columns = list(zip(*rows, strict=True))
    kinds = np.empty(width, np.int8)
    values = np.empty((width, len(rows)), np.int64)
    lengths = np.zeros((width, len(rows)), np.int64)
    valid = np.empty((width, len(rows)), np.uint8)
    pieces: list[Any] = []
    base = 0
    types = [*(c.type for c in table.columns), None]
    try:
        for c, (column, kind) in enumerate(zip(columns, types, strict=True)):
            plain = int if kind is None else str if kind.is_string else _PLAIN_TYPES[kind.kind]
            if not set(map(type, column)) <= {plain, _NONE}:
                return None
            arrow = pa.int32() if kind is None else kind.arrow
            kinds[c] = KIND_INT if kind is None else _KINDS[kind.avro.primitive]
            got, sizes, ok, data = _column(column, arrow)
            if data is not None:
                got = got + base
                lengths[c] = sizes
                base += len(data)
                pieces.append(data)
            values[c], valid[c] = got, ok
    except (pa.ArrowException, OverflowError, ValueError, TypeError):
        return None
    flags = np.array([*nullable, False], np.bool_)
    if not valid[~flags].all():
        return None  # a null where the schema has no null (sys_op, or a plain NOT NULL field)
    strings = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
    return records_of(kinds, flags, values, lengths, valid, strings)


def table_kinds(table: Table) -> Any:
    """The writer's kind of each of the table's columns, then of `sys_op` (an int)."""
    return np.array([*(_KINDS[c.type.avro.primitive] for c in table.columns), KIND_INT], np.int8)


def records_of(
    kinds: Any, nullable: Any, values: Any, lengths: Any, valid: Any, strings: Any
) -> tuple[Any, Any]:
    """The records of columns in `encode_records`' layout, and where each ends. The columns
    go to the kernel column-major whoever made them (a columnar cut's are, rows from Python
    are not, and a copy of either may be either): the kernel is compiled for one layout
    and not a signature for each mix (`podd_cdc.warm_up` compiles that one), and it finds
    a record's fields side by side, as it writes a record at a time."""
    count = values.shape[1]
    out = np.empty(count * values.shape[0] * 11 + int(lengths.sum()), np.uint8)
    ends = np.empty(count, np.int64)
    values, lengths = np.asfortranarray(values), np.asfortranarray(lengths)
    valid = np.asfortranarray(valid, dtype=np.uint8)
    encode_records(kinds, nullable, values, lengths, valid, strings, out, ends)
    return out, ends


def avro_long(value: int) -> bytes:
    """Avro's variable-length zigzag encoding of a long (wrapped to 64 bits)."""
    z = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _bytes(data: bytes) -> bytes:
    return avro_long(len(data)) + data


def _deflate(block: bytes) -> bytes:
    """Avro's deflate: raw RFC 1951, no zlib header; any inflater reads it. cramjam's (Rust)
    packs the CDC bench's blocks (12 KB) at about half zlib's CPU at the same level, 2% larger
    (`bench.cdc_deflate`: 1.0-1.2 µs a change against 1.8-2.1)."""
    return bytes(cramjam.deflate.compress(block, level=DEFLATE_LEVEL))


def _snappy(block: bytes) -> bytes:  # Avro's snappy: raw snappy, then the CRC32 of the input
    return bytes(cramjam.snappy.compress_raw(block)) + struct.pack(">I", zlib.crc32(block))


#: How each Avro codec packs a block.
BLOCK_PACKERS: dict[str, Callable[[bytes], bytes]] = {
    "null": bytes,
    "deflate": _deflate,
    "snappy": _snappy,
    "zstandard": lambda block: zstandard.compress(block, 3),
}


def container(schema: dict[str, Any], codec: str, records: Any, ends: Any) -> bytes:
    """An OCF of the encoded `records` (record `r` ends at `ends[r]`), in blocks cut where
    fastavro cuts them: after the record that takes a block to `BLOCK_BYTES`."""
    if codec not in BLOCK_PACKERS:
        raise ValueError(f"codec {codec!r} is not one of {', '.join(BLOCK_PACKERS)}")
    sync = os.urandom(SYNC_SIZE)
    meta = [(b"avro.schema", json.dumps(schema).encode()), (b"avro.codec", codec.encode())]
    parts = [
        OCF_MAGIC,
        avro_long(len(meta)),
        *(_bytes(k) + _bytes(v) for k, v in meta),
        avro_long(0),
        sync,
    ]
    first = start = 0
    while first < len(ends):
        last = min(int(np.searchsorted(ends, start + BLOCK_BYTES)), len(ends) - 1)
        block = records[start : ends[last]].tobytes()
        block = BLOCK_PACKERS[codec](block)
        parts += [avro_long(last + 1 - first), _bytes(block), sync]
        first, start = last + 1, int(ends[last])
    return b"".join(parts)
