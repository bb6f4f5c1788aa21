"""One side (`data` or `beforeData`) of some messages of one table, from a read batch
(`podd_cdc.qlik_batch`) into columns: the values the exact decoder makes, in the layout the
compiled body writer takes (`protocol.avro_encoder.encode_records`).

A row is `sure` only where every field names a column of the table (by its bytes, not only
its hash) and every value converts as the exact path converts it (`podd_cdc.values`,
`batch_form`); a row that is not sure is the exact decoder's, whole message and all. Which
columns a row gave is kept (`given`): an upsert needs them all, a delete only its key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

import numpy as np

from podd_cdc import column_kernels
from podd_cdc import qlik_batch_kernel as kernel
from podd_cdc.qlik_batch import QlikBatch
from podd_cdc.tables import MappedTable
from podd_cdc.values import MAX_VALUE_BYTES, batch_form

#: The forms whose values are texts: a start in the batch's `out`, and a length.
TEXT_FORMS = ("text", "hex", "decimal")
_EPOCH_DATE = date(1970, 1, 1)
_EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True)
class Columns:
    """Rows of one table, a row a message: `values[c, r]` is column c of row r (an integer,
    days, microseconds, 0 or 1, a float's bits, or a text's start in the batch's `out`)."""

    values: Any
    lengths: Any  # a text's length in bytes
    valid: Any  # not NULL
    given: Any  # the field was in the message
    fields: Any  # a row: how many fields it had, of a column or not
    sure: Any  # a row: converted as the exact path would


def _column_of(batch: QlikBatch, table: MappedTable, picked: Any) -> Any:
    """The column each picked field names, -1 for none: found by hash, then its bytes
    compared with the column's name (a hash can be made to collide)."""
    fields = batch.fields
    names = [c.source_name.encode() for c in table.columns]
    bounds = np.cumsum([0, *map(len, names)])
    text = np.frombuffer(b"".join(names), np.uint8)
    name_hashes = column_kernels.text_hashes(text, bounds[:-1], bounds[1:]).tolist()
    by_hash = {h: c for c, h in enumerate(name_hashes)}
    hashes, which = np.unique(fields[picked, kernel.F_HASH], return_inverse=True)
    found = np.array([by_hash.get(h, -1) for h in hashes.tolist()], np.int64)[which]
    starts, ends = fields[picked, kernel.F_KEY0], fields[picked, kernel.F_KEY1]
    column_kernels.same_texts(batch.out, starts, ends, text, bounds, found)
    return found


def _convert(
    batch: QlikBatch, form: str, limit: int | None, line: Any
) -> tuple[Any, Any, Any, Any]:
    """(values, lengths, valid, good) of the fields `line` of one column."""
    kind = line[:, kernel.F_KIND]
    count = len(line)
    values, lengths = line[:, kernel.F_INT].copy(), np.zeros(count, np.int64)
    valid, good = kind != kernel.V_NULL, kind == kernel.V_NULL
    text = kind == kernel.V_STR
    starts, ends = (
        np.where(text, line[:, kernel.F_STR0], 0),
        np.where(text, line[:, kernel.F_STR1], 0),
    )
    parsed, checked = np.zeros(count, np.int64), np.zeros(count, np.bool_)
    out = batch.out
    if form == "integer":  # the range is checked by the caller
        column_kernels.integers(out, starts, ends, parsed, checked)
        good |= (kind == kernel.V_INT) | (text & checked)
        values = np.where(text, parsed, values)
    elif form == "boolean":
        column_kernels.booleans(out, starts, ends, _BOOLEAN_WORDS, parsed, checked)
        good |= (kind == kernel.V_BOOL) | ((kind == kernel.V_INT) & ((values == 0) | (values == 1)))
        good |= text & checked
        values = np.where(text, parsed, values)
    elif form == "real":
        values = _reals(batch, line, values, good)
    elif form in TEXT_FORMS:
        chars = -1 if limit is None or form != "text" else limit
        column_kernels.texts(out, starts, ends, chars, MAX_VALUE_BYTES, checked)
        if form != "text":
            shaped = np.zeros(count, np.bool_)
            (column_kernels.hex_texts if form == "hex" else column_kernels.decimals)(
                out, starts, ends, shaped
            )
            checked &= shaped
        good |= text & checked
        values, lengths = starts, ends - starts
    elif form in _PARSED:
        _PARSED[form](out, starts, ends, parsed, checked)
        good |= text & checked
        values = parsed
    return values, lengths, valid, good


_PARSED = {
    "date": column_kernels.dates,
    "time": column_kernels.times_of_day,
    "timestamp": column_kernels.timestamps,
}
_BOOLEAN_WORDS = np.array([list(b"true\0"), list(b"false")], np.uint8)


def _reals(batch: QlikBatch, line: Any, values: Any, good: Any) -> Any:
    """A REAL column's fields as float bits: an int64 as its float, a number's text as
    Python reads it where it has a fraction or an exponent and is finite (a larger whole
    number is read otherwise by orjson: the exact path's)."""
    kind = line[:, kernel.F_KIND]
    floats = values.astype(np.float64)
    good |= kind == kernel.V_INT
    for k in np.nonzero(kind == kernel.V_NUMBER)[0].tolist():
        text = batch.out[line[k, kernel.F_STR0] : line[k, kernel.F_STR1]].tobytes()
        if b"." in text or b"e" in text or b"E" in text:
            floats[k] = float(text)
            good[k] = bool(np.isfinite(floats[k]))
    result: Any = floats.view(np.int64)
    return result


def _fields_of(batch: QlikBatch, messages: Any) -> tuple[Any, Any]:
    """The lines of `fields` of `messages` (each message's are together, in order), and
    the row (the place in `messages`) each is of."""
    starts, ends = batch.field_starts[messages], batch.field_starts[messages + 1]
    counts = ends - starts
    rows = np.repeat(np.arange(len(messages)), counts)
    first = np.cumsum(counts) - counts  # where each message's lines begin in the result
    return np.arange(int(counts.sum())) - first[rows] + starts[rows], rows


def side_columns(batch: QlikBatch, table: MappedTable, messages: Any, side: int) -> Columns:
    """The rows of `side` (0 data, 1 beforeData) of `messages` (read, of `table`)."""
    return both_sides(batch, table, messages)[side]


def both_sides(batch: QlikBatch, table: MappedTable, messages: Any) -> tuple[Columns, Columns]:
    """The rows of `data` and of `beforeData` of `messages` (read, of `table`): each column's
    fields of both sides converted in one pass."""
    fields = batch.fields
    picked, rows = _fields_of(batch, messages)
    side = fields[picked, kernel.F_SIDE]
    columns = _column_of(batch, table, picked)
    by_column = np.argsort(columns, kind="stable")
    bounds = np.searchsorted(columns[by_column], np.arange(len(table.columns) + 1))
    shape = (2, len(table.columns), len(messages))
    values, lengths = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    valid, given = np.zeros(shape, np.bool_), np.zeros(shape, np.bool_)
    sure = np.ones((2, len(messages)), np.bool_)
    alien = columns < 0  # a field of no column: the exact path names it
    sure[side[alien], rows[alien]] = False
    for c, column in enumerate(table.columns):
        these = by_column[bounds[c] : bounds[c + 1]]
        at, of, line = rows[these], side[these], fields[picked[these]]
        mapped = column.mapped
        form = batch_form(mapped)
        v, n, ok, good = _convert(batch, form, getattr(mapped.convert, "text_limit", None), line)
        if form == "integer" and mapped.bounds is not None:
            low, high = mapped.bounds
            good &= (line[:, kernel.F_KIND] == kernel.V_NULL) | ((v >= low) & (v <= high))
        values[of, c, at], lengths[of, c, at], valid[of, c, at], given[of, c, at] = v, n, ok, True
        sure[of[~good], at[~good]] = False
    counted = np.bincount(side * len(messages) + rows, minlength=2 * len(messages))
    fields_given = counted.reshape(2, len(messages))
    data, before = (
        Columns(values[k], lengths[k], valid[k], given[k], fields_given[k], sure[k]) for k in (0, 1)
    )
    return data, before


def python_rows(
    batch: QlikBatch, table: MappedTable, columns: Columns, rows: Any
) -> list[tuple[Any, ...]]:
    """Rows `rows` (their places in `columns`) as the exact decoder's values (None where
    NULL or not given): for tests and for a caller that needs a row whole."""
    forms = forms_of(table)
    return column_values(batch.out, forms, columns.values, columns.lengths, columns.valid, rows)


def forms_of(table: MappedTable) -> tuple[str, ...]:
    """How the batch takes each of the table's columns (`values.batch_form`)."""
    return tuple(batch_form(column.mapped) for column in table.columns)


def column_values(
    out: Any, forms: tuple[str, ...], values: Any, lengths: Any, valid: Any, rows: Any
) -> list[tuple[Any, ...]]:
    """Rows `rows` of columns in this layout (`values[c, r]`, texts in `out`), the first
    `len(forms)` columns, as the exact decoder's values (None where not `valid`)."""
    made: list[list[Any]] = []
    for c, form in enumerate(forms):
        these = values[c, rows]
        if form == "real":
            got: list[Any] = these.view(np.float64).tolist()
        elif form in TEXT_FORMS:
            starts, sizes = these.tolist(), lengths[c, rows].tolist()
            got = [out[s : s + n].tobytes().decode() for s, n in zip(starts, sizes, strict=True)]
        elif form == "date":
            got = [_EPOCH_DATE + timedelta(days=d) for d in these.tolist()]
        elif form == "timestamp":
            got = [_EPOCH + timedelta(microseconds=u) for u in these.tolist()]
        elif form == "time":
            got = [(_EPOCH + timedelta(microseconds=u)).time() for u in these.tolist()]
        elif form == "boolean":
            got = [v == 1 for v in these.tolist()]
        else:
            got = these.tolist()
        ok = valid[c, rows].tolist()
        made.append([v if good else None for v, good in zip(got, ok, strict=True)])
    return list(zip(*made, strict=True)) if made else []
