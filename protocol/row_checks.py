"""Row checks on decoded batches: what a well-formed body can still get wrong.

Each failure is `SCHEMA_MISMATCH` naming the row (1-based within the chunk) and the column:
`sys_op` null or not 0/1, null in a NOT NULL column, and values the PostgreSQL column cannot
hold (strings over their length or holding NUL, dates, times and timestamps out of range).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from protocol.errors import SchemaMismatchError
from protocol.schema import Table
from protocol.types import (
    PG_MAX_DATE_DAYS,
    PG_MIN_DATE_DAYS,
    PG_MIN_TIMESTAMP_MICROS,
    TIME_MAX_MICROS,
    TypeKind,
)

_INT64_MAX = 2**63 - 1
_RANGES: dict[TypeKind, tuple[int, int, str]] = {
    TypeKind.DATE: (PG_MIN_DATE_DAYS, PG_MAX_DATE_DAYS, "a date PostgreSQL can store"),
    TypeKind.TIMESTAMP: (PG_MIN_TIMESTAMP_MICROS, _INT64_MAX, "a timestamp after 4714 BC"),
    TypeKind.TIME: (0, TIME_MAX_MICROS, "a time of day from 00:00 to 24:00"),
}


def _fail(table: Table, row: int, column: str, problem: str) -> SchemaMismatchError:
    return SchemaMismatchError(f"table {table.name}, row {row}: {column} {problem}")


def check_batch(
    table: Table, batch: pa.RecordBatch, values: np.ndarray, valid: np.ndarray, first_row: int
) -> None:
    """Raise `SchemaMismatchError` for the first row that breaks a rule."""
    sys_pos = len(table.columns)
    sys_valid = valid[sys_pos]
    if not sys_valid.all():
        row = first_row + int(np.argmin(sys_valid)) + 1
        raise _fail(table, row, "sys_op", "is null")
    sys_values = values[sys_pos]
    bad = (sys_values != 0) & (sys_values != 1)
    if bad.any():
        index = int(np.argmax(bad))
        raise _fail(table, first_row + index + 1, "sys_op", f"is {sys_values[index]}, not 0 or 1")
    for pos, column in enumerate(table.columns):
        col_valid = valid[pos]
        if column.not_null and not col_valid.all():
            row = first_row + int(np.argmin(col_valid)) + 1
            raise _fail(table, row, column.name, "is NOT NULL but null")
        kind = column.type.kind
        if kind in _RANGES:
            low, high, what = _RANGES[kind]
            col = values[pos]
            out = ((col < low) | (col > high)) & col_valid.view(bool)
            if out.any():
                index = int(np.argmax(out))
                raise _fail(
                    table, first_row + index + 1, column.name, f"is {col[index]}, not {what}"
                )
        elif column.type.is_string:
            _check_strings(table, batch.column(pos), column.name, column.type.max_chars, first_row)


def _check_strings(
    table: Table, array: pa.Array, name: str, max_chars: int | None, first_row: int
) -> None:
    """Length limit (in characters, as varchar(n) counts) and no NUL.

    Both have a cheap pass first: a string has at most as many characters as bytes, and a
    NUL is a zero byte in the data buffer; the exact, slower search runs only on failure.
    """
    if len(array) == 0:
        return
    if max_chars is not None:
        longest_in_bytes = pc.max(pc.binary_length(array)).as_py()
        if longest_in_bytes is not None and longest_in_bytes > max_chars:
            too_long = pc.greater(pc.utf8_length(array), max_chars)
            if pc.any(too_long).as_py():
                index = pc.index(too_long, True).as_py()
                raise _fail(
                    table, first_row + index + 1, name, f"is longer than {max_chars} characters"
                )
    data = array.buffers()[2]
    if data is not None and np.frombuffer(data, dtype=np.uint8).min(initial=1) == 0:
        has_nul = pc.match_substring(array, "\x00")
        if pc.any(has_nul).as_py():
            index = pc.index(has_nul, True).as_py()
            raise _fail(table, first_row + index + 1, name, "holds a NUL character")
