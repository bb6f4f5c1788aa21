"""One side (`data` or `beforeData`; DataWorks' `after` or `before`) of some messages of one
table, from a read batch (`podd_cdc.qlik_batch`, `podd_cdc.dataworks_batch`) into columns:
the values the exact decoder makes, in the layout the compiled body writer takes
(`protocol.avro_encoder.encode_records`).

A row is `sure` only where every field names a column of the table (by its bytes, not only
its hash) and every value converts as the exact path converts it (`podd_cdc.values`,
`batch_form`); a row that is not sure is the exact decoder's, whole message and all. Which
columns a row gave is kept (`given`): an upsert needs them all, a delete only its key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from podd_cdc import column_kernels, json_rows
from podd_cdc.small_order import stable_order
from podd_cdc.tables import MappedTable
from podd_cdc.values import (
    MAX_MILLIS,
    MAX_VALUE_BYTES,
    MIN_MILLIS,
    batch_form,
    days_date,
    micros_time,
)


class ReadFields(Protocol):
    """A read batch's fields, as either batch reader leaves them (`podd_cdc.qlik_batch`,
    `podd_cdc.dataworks_batch`): texts in `out`, a line of `fields` a field
    (`podd_cdc.json_rows`), message m's lines from `field_starts[m]` to `field_starts[m + 1]`."""

    @property
    def out(self) -> Any: ...

    @property
    def fields(self) -> Any: ...

    @property
    def field_starts(self) -> Any: ...


#: The forms whose values are texts: a start in the batch's `out`, and a length.
TEXT_FORMS = ("text", "hex", "decimal", "base64")
#: A text form's shape, checked past its length: hexadecimal, a decimal, base64.
_SHAPES = {
    "hex": column_kernels.hex_texts,
    "decimal": column_kernels.decimals,
    "base64": column_kernels.base64_texts,
}


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


def _convert(
    batch: ReadFields, form: str, limit: int | None, line: Any
) -> tuple[Any, Any, Any, Any]:
    """(values, lengths, valid, good) of the fields `line` of one column."""
    kind = line[:, json_rows.F_KIND]
    count = len(line)
    values, lengths = line[:, json_rows.F_INT].copy(), np.zeros(count, np.int64)
    valid, good = kind != json_rows.V_NULL, kind == json_rows.V_NULL
    text = kind == json_rows.V_STR
    starts, ends = (
        np.where(text, line[:, json_rows.F_STR0], 0),
        np.where(text, line[:, json_rows.F_STR1], 0),
    )
    parsed, checked = np.zeros(count, np.int64), np.zeros(count, np.bool_)
    out = batch.out
    if form == "integer":  # the range is checked by the caller
        column_kernels.integers(out, starts, ends, parsed, checked)
        good |= (kind == json_rows.V_INT) | (text & checked)
        values = np.where(text, parsed, values)
    elif form == "boolean":
        column_kernels.booleans(out, starts, ends, _BOOLEAN_WORDS, parsed, checked)
        good |= (kind == json_rows.V_BOOL) | (
            (kind == json_rows.V_INT) & ((values == 0) | (values == 1))
        )
        good |= text & checked
        values = np.where(text, parsed, values)
    elif form == "real":
        values = _reals(batch, line, values, good)
    elif form == "millis":  # DataWorks' DATE: a JSON integer of ms since 1970, held in µs
        fits = (kind == json_rows.V_INT) & (values >= MIN_MILLIS) & (values <= MAX_MILLIS)
        good |= fits
        values = np.where(fits, values, 0) * 1000
    elif form in TEXT_FORMS:
        chars = -1 if limit is None or form != "text" else limit
        column_kernels.texts(out, starts, ends, chars, MAX_VALUE_BYTES, checked)
        if form != "text":
            shaped = np.zeros(count, np.bool_)
            _SHAPES[form](out, starts, ends, shaped)
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


#: Number texts at most this long are read as floats together (`_reals`), longer ones one
#: at a time: a float's shortest text has at most 24 characters.
WIDEST = 64


def _reals(batch: ReadFields, line: Any, values: Any, good: Any) -> Any:
    """A REAL column's fields as float bits: an int64 as its float, a number's text as
    Python reads it where it has a fraction or an exponent and is finite (a larger whole
    number is read otherwise by orjson: the exact path's)."""
    kind = line[:, json_rows.F_KIND]
    floats = values.astype(np.float64)
    good |= kind == json_rows.V_INT
    numbers = np.nonzero(kind == json_rows.V_NUMBER)[0]
    long = numbers[line[numbers, json_rows.F_STR1] - line[numbers, json_rows.F_STR0] > WIDEST]
    for k in long.tolist():  # a hostile length must not size the matrix below
        text = batch.out[line[k, json_rows.F_STR0] : line[k, json_rows.F_STR1]].tobytes()
        if b"." in text or b"e" in text or b"E" in text:
            floats[k] = float(text)
            good[k] = bool(np.isfinite(floats[k]))
    numbers = np.setdiff1d(numbers, long)
    if not len(numbers):
        return floats.view(np.int64)
    starts, ends = line[numbers, json_rows.F_STR0], line[numbers, json_rows.F_STR1]
    width = int((ends - starts).max())
    at = starts[:, None] + np.arange(width)[None, :]
    texts = np.where(at < ends[:, None], batch.out[np.minimum(at, len(batch.out) - 1)], 0)
    # A fraction or an exponent: a float, which numpy's bytes-to-float reads as Python's
    # `float` does (correctly rounded, the same bits); a whole number is orjson's to read.
    real = ((texts == 46) | (texts == 101) | (texts == 69)).any(axis=1)
    parsed = texts.astype(np.uint8).view(f"S{width}").reshape(-1)[real].astype(np.float64)
    floats[numbers[real]] = parsed
    good[numbers[real]] = np.isfinite(parsed)
    result: Any = floats.view(np.int64)
    return result


def _fields_of(batch: ReadFields, messages: Any) -> tuple[Any, Any]:
    """The lines of `fields` of `messages` (each message's are together, in order), and
    the row (the place in `messages`) each is of."""
    starts, ends = batch.field_starts[messages], batch.field_starts[messages + 1]
    counts = ends - starts
    rows = np.repeat(np.arange(len(messages)), counts)
    first = np.cumsum(counts) - counts  # where each message's lines begin in the result
    return np.arange(int(counts.sum())) - first[rows] + starts[rows], rows


def side_columns(batch: ReadFields, table: MappedTable, messages: Any, side: int) -> Columns:
    """The rows of `side` (0 data, 1 beforeData) of `messages` (read, of `table`)."""
    return both_sides(batch, table, messages)[side]


def both_sides(batch: ReadFields, table: MappedTable, messages: Any) -> tuple[Columns, Columns]:
    """The rows of `data` and of `beforeData` of `messages` (read, of `table`)."""
    return tables_sides(batch, [(table, messages)])[0]


def tables_sides(
    batch: ReadFields, groups: Sequence[tuple[MappedTable, Any]]
) -> list[tuple[Columns, Columns]]:
    """For each (table, its messages) of a read batch, the rows of `data` and of
    `beforeData`. Every field of every table and side is converted at once for each way a
    column is taken (`_Plan`), so a fetch of many tables costs a few calls per form, not a
    few per column of each table."""
    plan = _Plan([table for table, _ in groups])
    counts = np.array([len(m) for _, m in groups], np.int64)
    messages = joined_messages([m for _, m in groups])
    total = len(messages)
    first_row = np.cumsum(counts) - counts
    blocks = 2 * plan.widths * counts  # each table's (2, width, rows), one after another
    first_at = np.cumsum(blocks) - blocks
    table_of_row = np.repeat(np.arange(len(groups)), counts)
    picked, rows = _fields_of(batch, messages)
    fields = batch.fields
    side = fields[picked, json_rows.F_SIDE]
    column = plan.columns_of(batch, picked, table_of_row[rows])
    counted = np.bincount(side * total + rows, minlength=2 * total)  # fields, named or not
    sure = np.ones(2 * total, np.bool_)
    sure[side[column < 0] * total + rows[column < 0]] = False  # a field of no column
    named = np.nonzero(column >= 0)[0]
    column, picked, rows, side = column[named], picked[named], rows[named], side[named]
    table = plan.table_of[column]
    width = plan.widths[table]
    local = rows - first_row[table]
    at = first_at[table] + (side * width + plan.position[column]) * counts[table] + local
    size = int(blocks.sum())
    values, lengths = np.zeros(size, np.int64), np.zeros(size, np.int64)
    valid, given = np.zeros(size, np.bool_), np.zeros(size, np.bool_)
    way = plan.way_of[column]
    by_way = stable_order(way, len(plan.ways) - 1)
    ends = np.searchsorted(way[by_way], np.arange(len(plan.ways) + 1))
    for w, (form, limit) in enumerate(plan.ways):
        these = by_way[ends[w] : ends[w + 1]]
        if not len(these):
            continue
        line = np.take(fields, picked[these], axis=0)  # half the time of fields[...]
        v, n, ok, good = _convert(batch, form, limit, line)
        if form == "integer":
            low, high = plan.low[column[these]], plan.high[column[these]]
            good &= (line[:, json_rows.F_KIND] == json_rows.V_NULL) | ((v >= low) & (v <= high))
        where = at[these]
        values[where], lengths[where], valid[where], given[where] = v, n, ok, True
        bad = these[~good]
        sure[side[bad] * total + rows[bad]] = False
    arrays = (values, lengths, valid, given)
    places = zip(
        first_at.tolist(), first_row.tolist(), plan.widths.tolist(), counts.tolist(), strict=True
    )
    return [_table_sides(arrays, counted, sure, total, *place) for place in places]


def _table_sides(
    arrays: tuple[Any, ...],
    counted: Any,
    sure: Any,
    total: int,
    at: int,
    row: int,
    wide: int,
    n: int,
) -> tuple[Columns, Columns]:
    """One table's two sides, cut from the arrays of every table: its `(2, wide, n)` block
    of each from `at`, and its `n` rows from `row` of `counted` and `sure` (by side, then
    row)."""
    values, lengths, valid, given = (a[at : at + 2 * wide * n].reshape(2, wide, n) for a in arrays)
    rows = slice(row, row + n)
    data, before = (
        Columns(
            values[k],
            lengths[k],
            valid[k],
            given[k],
            counted[k * total :][rows],
            sure[k * total :][rows],
        )
        for k in (0, 1)
    )
    return data, before


def joined_messages(groups: Sequence[Any]) -> Any:
    """Several groups of a batch's messages (their places in it) as one array, in order."""
    return np.concatenate([np.asarray(m, np.int64) for m in groups] or [_NONE])


_NONE = np.zeros(0, np.int64)


class _Plan:
    """The columns of some tables, numbered across them, with how each is taken: its form
    and text limit (a "way"), and an integer's bounds."""

    def __init__(self, tables: Sequence[MappedTable]) -> None:
        columns = [
            (t, c, column)
            for t, table in enumerate(tables)
            for c, column in enumerate(table.columns)
        ]
        self.table_of = np.array([t for t, _, _ in columns], np.int64)
        self.position = np.array([c for _, c, _ in columns], np.int64)
        self.widths = np.array([len(table.columns) for table in tables], np.int64)
        ways = [
            (batch_form(column.mapped), getattr(column.mapped.convert, "text_limit", None))
            for _, _, column in columns
        ]
        self.ways = sorted(set(ways), key=repr)
        self.way_of = np.array([self.ways.index(w) for w in ways], np.int64)
        bounds = [column.mapped.bounds or (0, 0) for _, _, column in columns]
        self.low = np.array([b[0] for b in bounds], np.int64)
        self.high = np.array([b[1] for b in bounds], np.int64)
        names = [column.source_name.encode() for _, _, column in columns]
        self.bounds = np.cumsum([0, *map(len, names)])
        self.names = np.frombuffer(b"".join(names), np.uint8)
        hashes = column_kernels.text_hashes(self.names, self.bounds[:-1], self.bounds[1:])
        keys = _keyed(self.table_of, hashes)
        # Sorted, each key once: of two columns whose keys meet, the last one's (the first's
        # fields are then not sure, and go to the exact path).
        last = len(keys) - 1 - np.unique(keys[::-1], return_index=True)[1]
        self.keys, self.key_columns = keys[last], last.astype(np.int64)

    def columns_of(self, batch: ReadFields, picked: Any, table: Any) -> Any:
        """The column (numbered across the tables) each picked field of table `table[k]`
        names, -1 for none: found by its table and hash, then its bytes compared with the
        column's name (a hash can be made to collide)."""
        fields = batch.fields
        keys = _keyed(table, fields[picked, json_rows.F_HASH])
        starts, ends = fields[picked, json_rows.F_KEY0], fields[picked, json_rows.F_KEY1]
        found = column_kernels.field_columns(
            keys, table.astype(np.int64, copy=False), self.keys, self.key_columns, self.table_of
        )
        column_kernels.same_texts(batch.out, starts, ends, self.names, self.bounds, found)
        return found


def _keyed(table: Any, hashes: Any) -> Any:
    """A name's hash mixed with its table's number: one integer to look a column up by."""
    mixed = table.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return mixed.view(np.int64) ^ hashes


def python_rows(
    batch: ReadFields, table: MappedTable, columns: Columns, rows: Any
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
            got = [days_date(d) for d in these.tolist()]
        elif form in ("timestamp", "millis"):
            got = [micros_time(u) for u in these.tolist()]
        elif form == "time":
            got = [micros_time(u).time() for u in these.tolist()]
        elif form == "boolean":
            got = [v == 1 for v in these.tolist()]
        else:
            got = these.tolist()
        ok = valid[c, rows].tolist()
        made.append([v if good else None for v, good in zip(got, ok, strict=True)])
    return list(zip(*made, strict=True)) if made else []
