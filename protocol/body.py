"""Reading `delta.in` bodies: the writer-schema check and decoding into Arrow batches.

A body is an Avro OCF whose records are the table's columns in logical order, then `sys_op`.
Fields are resolved by position and type, never by name (PROTOCOL.md, "Encoding"); any field
may be a union of "null" and its type. Problems are typed errors with the PROTOCOL.md code:
undecodable bytes are `BAD_CHUNK`, a body that does not fit the table is `SCHEMA_MISMATCH`.
The container is read by `protocol.ocf` within `OcfLimits`: only the `null` and `deflate`
codecs, and a bound on the bytes a block and a chunk decompress to (`BAD_CHUNK` beyond).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import pyarrow as pa

from protocol import avro_kernel as k
from protocol.errors import BadChunkError, SchemaMismatchError
from protocol.ocf import ContainerError, OcfHeader, OcfLimits, iter_blocks, read_header
from protocol.row_checks import check_batch
from protocol.schema import Table
from protocol.types import SYS_OP_ARROW, AvroShape

SYS_OP = "sys_op"
#: Rows per Arrow batch at most; a chunk larger than this yields several batches.
DEFAULT_BATCH_ROWS = 65_536

_KIND_OF_PRIMITIVE = {
    "boolean": k.KIND_BOOLEAN,
    "int": k.KIND_INT,
    "long": k.KIND_LONG,
    "float": k.KIND_FLOAT,
    "double": k.KIND_DOUBLE,
    "string": k.KIND_STRING,
}
_MAX_STRING_BYTES = 2**31 - 1  # Arrow `string` offsets are int32


@dataclass(frozen=True)
class BodyLayout:
    """How a checked writer schema lays out one table's records."""

    table: Table
    kinds: np.ndarray  # field kind per field (columns then sys_op)
    wraps: np.ndarray  # PLAIN / NULL_FIRST / NULL_SECOND per field
    codec: str

    @property
    def min_record_bytes(self) -> int:
        """The fewest bytes a record can take (a null or a one-byte varint per field)."""
        widths = {k.KIND_FLOAT: 4, k.KIND_DOUBLE: 8}
        return sum(
            1 if wrap != k.PLAIN else widths.get(int(kind), 1)
            for kind, wrap in zip(self.kinds, self.wraps, strict=True)
        )


def arrow_schema(table: Table) -> pa.Schema:
    """The Arrow schema of decoded batches: the logical columns, then `sys_op`."""
    fields = [pa.field(c.name, c.type.arrow, nullable=c.nullable) for c in table.columns]
    return pa.schema([*fields, pa.field(SYS_OP, SYS_OP_ARROW, nullable=False)])


def _shape_of(avro_type: Any) -> AvroShape | None:
    """Primitive + logical type of a non-union Avro type, or None if it is not flat."""
    if isinstance(avro_type, str):
        return AvroShape(avro_type) if avro_type in _KIND_OF_PRIMITIVE else None
    if isinstance(avro_type, dict):
        inner = avro_type.get("type")
        if isinstance(inner, str) and inner in _KIND_OF_PRIMITIVE:
            logical = avro_type.get("logicalType")
            return AvroShape(inner, logical if isinstance(logical, str) else None)
    return None


def _unwrap(avro_type: Any) -> tuple[int, Any]:
    """(wrap, inner type) for T, ["null", T] or [T, "null"]; (-1, None) otherwise."""
    if isinstance(avro_type, list):
        if len(avro_type) == 2 and avro_type[0] == "null" and avro_type[1] != "null":
            return k.NULL_FIRST, avro_type[1]
        if len(avro_type) == 2 and avro_type[1] == "null" and avro_type[0] != "null":
            return k.NULL_SECOND, avro_type[0]
        return -1, None
    return k.PLAIN, avro_type


def _describe(avro_type: Any) -> str:
    return json.dumps(avro_type, separators=(",", ":"))[:120]


class BodyFormat(StrEnum):
    """Who wrote a body: a `delta.in` sender (PROTOCOL.md), or Prostore's backup writer
    (BACKUP.md), which writes timestamps, dates and times as plain long/int."""

    DELTA_IN = "delta.in"
    BACKUP = "backup"


_TEMPORAL = frozenset({"date", "time-micros", "timestamp-micros"})


def _fits(found: AvroShape | None, shape: AvroShape, body_format: BodyFormat) -> bool:
    if found == shape:
        return True
    # The backup writer's temporal columns: the same primitive, no logical type.
    return (
        body_format is BodyFormat.BACKUP
        and shape.logical in _TEMPORAL
        and found == AvroShape(shape.primitive)
    )


def check_writer_schema(
    table: Table,
    writer_schema: Any,
    codec: str = "null",
    body_format: BodyFormat = BodyFormat.DELTA_IN,
) -> BodyLayout:
    """Check a body's writer schema against the table, by position and type.

    Raises `SchemaMismatchError` naming the first field that does not fit.
    """
    if not isinstance(writer_schema, dict) or writer_schema.get("type") != "record":
        raise SchemaMismatchError(f"table {table.name}: the body's schema is not a record")
    fields = writer_schema.get("fields")
    if not isinstance(fields, list):
        raise SchemaMismatchError(f"table {table.name}: the body's record has no fields")
    expected = len(table.columns) + 1
    if len(fields) != expected:
        raise SchemaMismatchError(
            f"table {table.name}: the body has {len(fields)} fields, expected {expected} "
            f"({len(table.columns)} columns, then sys_op)"
        )
    kinds: list[int] = []
    wraps: list[int] = []
    wanted: list[tuple[str, AvroShape]] = [(c.name, c.type.avro) for c in table.columns]
    wanted.append((SYS_OP, AvroShape("int")))
    for position, (field, (column, shape)) in enumerate(zip(fields, wanted, strict=True), 1):
        field_type = field.get("type") if isinstance(field, dict) else None
        wrap, inner = _unwrap(field_type)
        found = _shape_of(inner) if wrap >= 0 else None
        if not _fits(found, shape, body_format):
            what = "sys_op (last field)" if column == SYS_OP else f"column {column}"
            raise SchemaMismatchError(
                f"table {table.name}: field {position} is {_describe(field_type)}, "
                f'but {what} needs {shape.describe()} or ["null", {shape.describe()}]'
            )
        kinds.append(_KIND_OF_PRIMITIVE[shape.primitive])
        wraps.append(wrap)
    return BodyLayout(
        table=table,
        kinds=np.array(kinds, dtype=np.int8),
        wraps=np.array(wraps, dtype=np.int8),
        codec=codec,
    )


def _open(data: bytes, limits: OcfLimits) -> OcfHeader:
    try:
        return read_header(data, limits)
    except ContainerError as exc:
        raise BadChunkError(
            f"the body is not an Avro container this replica reads: {exc}"
        ) from None


def _layout(
    table: Table, header: OcfHeader, body_format: BodyFormat = BodyFormat.DELTA_IN
) -> BodyLayout:
    try:
        writer_schema = json.loads(header.schema_text)
    except ValueError as exc:
        raise BadChunkError(f"the body's header holds no readable schema: {exc}") from None
    return check_writer_schema(table, writer_schema, header.codec, body_format)


def read_body_layout(
    table: Table,
    data: bytes | None,
    limits: OcfLimits | None = None,
    body_format: BodyFormat = BodyFormat.DELTA_IN,
) -> BodyLayout | None:
    """The early check: read only the OCF header and check its writer schema.

    Returns None for an empty body (zero bytes or null: no records, nothing to check).
    """
    return _layout(table, _open(data, limits or OcfLimits()), body_format) if data else None


def decode_body(
    table: Table,
    data: bytes | None,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    limits: OcfLimits | None = None,
    body_format: BodyFormat = BodyFormat.DELTA_IN,
) -> Iterator[pa.RecordBatch]:
    """Decode a chunk body into Arrow batches typed as `arrow_schema(table)`.

    Rows keep their order. Checks the writer schema first, then every row (`sys_op` in
    {0, 1}, NOT NULL, lengths and ranges the PostgreSQL column can hold).
    """
    if not data:
        return
    limits = limits or OcfLimits()
    header = _open(data, limits)
    layout = _layout(table, header, body_format)
    schema = arrow_schema(table)
    pending: list[bytes] = []
    pending_rows = 0
    first_row = 0
    try:
        for block in iter_blocks(data, header, limits):
            pending.append(block.payload)
            pending_rows += block.count
            if pending_rows >= batch_rows:
                yield _decode_batch(layout, schema, pending, pending_rows, first_row)
                first_row += pending_rows
                pending, pending_rows = [], 0
        if pending_rows or any(pending):
            yield _decode_batch(layout, schema, pending, pending_rows, first_row)
    except (BadChunkError, SchemaMismatchError):
        raise
    except Exception as exc:  # corrupt blocks: bad sync, bad compression, short reads
        raise BadChunkError(f"the body cannot be decoded: {type(exc).__name__}: {exc}") from None


def _decode_batch(
    layout: BodyLayout, schema: pa.Schema, payloads: Sequence[bytes], nrows: int, first_row: int
) -> pa.RecordBatch:
    buf = np.frombuffer(b"".join(payloads), dtype=np.uint8)
    nfields = layout.kinds.shape[0]
    # Every field takes at least one byte, so a count the bytes cannot hold is corrupt;
    # checking first keeps a forged count from sizing the output matrices.
    if nrows < 0 or nrows * layout.min_record_bytes > buf.shape[0]:
        raise BadChunkError(
            f"table {layout.table.name}: the blocks claim {nrows} records in {buf.shape[0]} bytes"
        )
    values = np.empty((nfields, nrows), dtype=np.int64)
    lengths = np.empty((nfields, nrows), dtype=np.int64)
    valid = np.empty((nfields, nrows), dtype=np.uint8)
    status, row, field, pos = k.decode_records(
        buf, nrows, layout.kinds, layout.wraps, values, lengths, valid
    )
    if status != k.OK:
        where = f"row {first_row + row + 1}, field {field + 1}" if row < nrows else "end"
        raise BadChunkError(
            f"table {layout.table.name}: the body cannot be decoded at {where} "
            f"(byte {pos} of the block data): {k.STATUS_TEXT[status]}"
        )
    arrays = [
        _to_arrow(buf, schema.field(i).type, values[i], lengths[i], valid[i], nrows)
        for i in range(nfields)
    ]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    check_batch(layout.table, batch, values, valid, first_row)
    return batch


def _to_arrow(
    buf: np.ndarray,
    arrow_type: pa.DataType,
    values: np.ndarray,
    lengths: np.ndarray,
    valid: np.ndarray,
    nrows: int,
) -> pa.Array:
    nulls = nrows - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    if pa.types.is_string(arrow_type):
        total = int(lengths.sum())  # the kernel gives nulls length 0
        if total > _MAX_STRING_BYTES:
            raise BadChunkError("a string column holds more than 2 GiB in one batch")
        out = np.empty(total, dtype=np.uint8)
        offsets = np.empty(nrows + 1, dtype=np.int32)
        k.gather_strings(buf, values, lengths, out, offsets)
        array = pa.Array.from_buffers(
            arrow_type, nrows, [bitmap, pa.py_buffer(offsets), pa.py_buffer(out)], nulls
        )
        try:
            array.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise BadChunkError(f"a string is not valid UTF-8: {exc}") from None
        return array
    if pa.types.is_boolean(arrow_type):
        data = np.packbits(values.astype(bool), bitorder="little")
    elif pa.types.is_float32(arrow_type):
        data = values.astype(np.uint32).view(np.float32)
    elif pa.types.is_int32(arrow_type) or pa.types.is_date32(arrow_type):
        data = values.astype(np.int32)
    else:  # int64, float64 bits, time64[us], timestamp[us]
        data = np.ascontiguousarray(values)
    return pa.Array.from_buffers(arrow_type, nrows, [bitmap, pa.py_buffer(data)], nulls)
