"""Prostore types in the ADQM store (docs/contracts/REPLICA.md, "The ADQM store": Types), and the
rows a delta brings, checked and shaped for ClickHouse before anything is written.

Decoding (`protocol.body`) already refused what no store may hold (nulls in NOT NULL
columns, strings over their length, `sys_op` other than 0 or 1). ClickHouse adds its own
ranges: `Date32` and `DateTime64(6)` hold 1900-01-01 to 2299-12-31, and `UUID` only
canonical UUID text. A value outside them is `SCHEMA_MISMATCH` naming the row and column,
before the delta writes anything: ClickHouse would otherwise clamp a date, or fail halfway.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from protocol.errors import SchemaMismatchError
from protocol.schema import Table
from protocol.types import ColumnType, TypeKind

_CLICKHOUSE: dict[TypeKind, str] = {
    TypeKind.BOOLEAN: "Bool",
    TypeKind.INT32: "Int32",
    TypeKind.INT: "Int64",
    TypeKind.BIGINT: "Int64",
    TypeKind.FLOAT: "Float32",
    TypeKind.DOUBLE: "Float64",
    TypeKind.CHAR: "String",
    TypeKind.VARCHAR: "String",
    TypeKind.LINK: "String",
    TypeKind.UUID: "UUID",
    TypeKind.DATE: "Date32",
    TypeKind.TIME: "Int64",  # microseconds since midnight
    TypeKind.TIMESTAMP: "DateTime64(6, 'UTC')",
}

#: Days since 1970-01-01 of 1900-01-01 and 2299-12-31, `Date32`'s range.
DATE32_MIN_DAYS = -25_567
DATE32_MAX_DAYS = 120_529
#: `DateTime64(6)`'s range in microseconds since the epoch.
DATETIME64_MIN_MICROS = DATE32_MIN_DAYS * 86_400_000_000
DATETIME64_MAX_MICROS = (DATE32_MAX_DAYS + 1) * 86_400_000_000 - 1
UUID_TEXT = r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"


def clickhouse_type(column_type: ColumnType, nullable: bool) -> str:
    base = _CLICKHOUSE[column_type.kind]
    return f"Nullable({base})" if nullable else base


def column_types(table: Table) -> list[tuple[str, str]]:
    """(name, ClickHouse type) of the logical columns; key columns are never Nullable."""
    keys = set(table.primary_key)
    return [
        (c.name, clickhouse_type(c.type, c.nullable and c.name not in keys)) for c in table.columns
    ]


def _fail(table: Table, row: int, column: str, problem: str) -> SchemaMismatchError:
    return SchemaMismatchError(f"table {table.name}, row {row}: {column} {problem}")


def _check_range(table: Table, name: str, values: pa.Array, low: int, high: int, what: str) -> None:
    out = pc.or_(pc.less(values, low), pc.greater(values, high))
    if pc.any(out).as_py():
        index = pc.index(out, True).as_py()
        raise _fail(table, index + 1, name, f"is {values[index].as_py()}, not {what}")


def shaped(table: Table, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The delta's rows (logical columns, then `sys_op`) as the ADQM store's staging takes
    them: TIME as microseconds, timestamps as UTC; `SchemaMismatchError` for a value
    ClickHouse cannot hold (rows counted within `batch`)."""
    arrays: list[pa.Array] = []
    for position, column in enumerate(table.columns):
        array = batch.column(position)
        kind = column.type.kind
        if kind is TypeKind.DATE:
            days = array.cast(pa.int32())
            what = "a date from 1900-01-01 to 2299-12-31"
            _check_range(table, column.name, days, DATE32_MIN_DAYS, DATE32_MAX_DAYS, what)
        elif kind is TypeKind.TIMESTAMP:
            micros = array.cast(pa.int64())
            low, high = DATETIME64_MIN_MICROS, DATETIME64_MAX_MICROS
            what = "a timestamp from 1900-01-01 to 2299-12-31"
            _check_range(table, column.name, micros, low, high, what)
            array = micros.cast(pa.timestamp("us", tz="UTC"))
        elif kind is TypeKind.TIME:
            array = array.cast(pa.int64())
        elif kind is TypeKind.UUID:
            bad = pc.invert(pc.match_substring_regex(array, UUID_TEXT))
            if pc.any(bad).as_py():
                index = pc.index(bad, True).as_py()
                raise _fail(table, index + 1, column.name, "is not UUID text")
        arrays.append(array)
    arrays.append(batch.column(len(table.columns)).cast(pa.int8()))
    return pa.RecordBatch.from_arrays(arrays, [*table.column_names, "sys_op"])


def read_expression(column_type: ColumnType, quoted: str) -> str:
    """What a read selects for a column so that its values come back as the model's."""
    if column_type.kind is TypeKind.UUID:
        return f"toString({quoted})"
    return quoted


def as_model_values(table: Table, result: pa.Table) -> list[tuple[object, ...]]:
    """Rows read back (`read_expression`) with the Python values decoding gives."""
    columns = []
    for position, column in enumerate(table.columns):
        array = result.column(position)
        kind = column.type.kind
        if kind is TypeKind.TIME:
            array = array.cast(pa.int64()).cast(pa.time64("us"))
        elif kind is TypeKind.TIMESTAMP:
            array = array.cast(pa.timestamp("us"))
        columns.append(array.to_pylist())
    return list(zip(*columns, strict=True)) if columns else []
