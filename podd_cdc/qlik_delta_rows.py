"""A delta's rows on columns (step 3 of the columnar origin, docs/cdc/internals.md): from the
Qlik changes a cut took (`QlikHeld.take`) and the blocks of columns they point into, each
table's rows as `podd_cdc.rows.delta_rows` makes them: the last change to each key, in the
delta's order, with an UPDATE that moves a row to another key also deleting the old key.

The delta's order is the exact path's: full-load (REFRESH) rows first, then the changes by
sequence; ties by where they were read (partition, offset; one topic). A change's rows keep
their order (an old key's delete before the upsert). A key is compared as Python compares
the exact decoder's values: texts by their bytes (grouped by hash, then compared, so a
forged collision is only slower), REALs as floats (so 0.0 and -0.0 are one key), the rest as
the integers they are held as.

Texts are gathered into one buffer a table, from the rows the delta takes only, not from the
whole batches those rows were read in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numba
import numpy as np

from podd_cdc.qlik_batch import distinct_texts
from podd_cdc.qlik_columns import TEXT_FORMS, Columns, column_values, forms_of
from podd_cdc.qlik_held import HeldChanges
from podd_cdc.tables import MappedTable
from protocol.apply_model import DeltaRow
from protocol.body_writer import column_records
from protocol.schema import LogicalSchema, Table
from protocol.types import TypeKind


class Block(Protocol):
    """What held changes point into (`HeldChanges.block`, and `line` there): one table's
    changes of one read batch (`TableBlock`), or of the exact decoder
    (`podd_cdc.qlik_exact_block.ExactBlock`)."""

    @property
    def table(self) -> MappedTable: ...

    def rows(self, lines: Any, ranks: Any) -> tuple[DeltaTable, tuple[Any, Any]]:
        """The rows changes `lines` make, with each row's change's rank (`ranks`) and its
        place among that change's rows."""
        ...


class RowImages(Protocol):
    """A read batch's changes of one table (a line each) as the rows they make
    (`change_rows`): Qlik's (`qlik_batch_changes.TableChanges`) and DataWorks'
    (`dataworks_batch_changes.DataWorksChanges`)."""

    @property
    def messages(self) -> Any:
        """Each line's message, in the batch."""
        ...

    @property
    def data(self) -> Columns:
        """The row an upsert writes (Qlik's `data`, DataWorks' `after`)."""
        ...

    @property
    def before(self) -> Columns:
        """The row before the change (Qlik's `beforeData`, DataWorks' `before`)."""
        ...

    def deleting(self, lines: Any) -> Any:
        """Which of `lines` delete a row (the rest upsert their `data`)."""
        ...

    def old_deleted(self, upserts: Any) -> Any:
        """Which of the upserting `upserts` delete their `before` row first."""
        ...

    def before_gone(self, deletes: Any) -> Any:
        """Which of the deleting `deletes` delete their `before` row (the rest their
        `data`)."""
        ...


@dataclass(frozen=True)
class TableBlock:
    """One table's changes of one read batch."""

    table: MappedTable
    out: Any  # the batch's text buffer
    made: RowImages

    def rows(self, lines: Any, ranks: Any) -> tuple[DeltaTable, tuple[Any, Any]]:
        return _block_rows(self, lines, ranks)


@dataclass(frozen=True)
class DeltaTable:
    """One table's rows of a delta, in `encode_records`' layout with `sys_op` the last
    column (`values[c, r]`: an integer, a float's bits, or a text's start in `strings`), and
    how the batch took each column (`qlik_columns.forms_of`)."""

    table: Table
    forms: tuple[str, ...]
    values: Any
    lengths: Any
    valid: Any
    strings: Any

    def __len__(self) -> int:
        return int(self.values.shape[1])

    @classmethod
    def empty(cls, table: Table) -> DeltaTable:
        width = len(table.columns) + 1
        none = np.zeros((width, 0), np.int64)
        forms = ("",) * len(table.columns)
        return cls(table, forms, none, none, none.astype(np.bool_), np.zeros(0, np.uint8))


def delta_tables(
    schema: LogicalSchema, taken: HeldChanges, blocks: Mapping[int, Block]
) -> dict[str, DeltaTable]:
    """Per table of `schema`, the rows the changes `taken` make (empty where none)."""
    rank = _delta_order(taken)
    parts: dict[str, list[DeltaTable]] = {}
    orders: dict[str, list[tuple[Any, Any]]] = {}
    by_block = np.argsort(taken.block, kind="stable")  # each block's changes in taken order
    numbers, starts = np.unique(taken.block[by_block], return_index=True)
    ends = [*starts[1:].tolist(), len(by_block)]
    for block, start, end in zip(numbers.tolist(), starts.tolist(), ends, strict=True):
        mine = by_block[start:end]
        found = blocks[block]
        rows, order = found.rows(taken.line[mine], rank[mine])
        parts.setdefault(found.table.name, []).append(rows)
        orders.setdefault(found.table.name, []).append(order)
    made = {}
    for table in schema:
        if table.name not in parts:
            made[table.name] = DeltaTable.empty(table)
            continue
        joined = _joined(parts[table.name])
        rank_of, sub = (np.concatenate(o) for o in zip(*orders[table.name], strict=True))
        made[table.name] = _last_per_key(joined, rank_of, sub)
    return made


def python_rows_of(tables: Mapping[str, DeltaTable]) -> dict[str, list[DeltaRow]]:
    """Each table's rows with the exact decoder's values, as `podd_cdc.rows.delta_rows`
    makes them (so `rows_digest` of them is the digest today's cut records)."""
    made = {}
    for name, rows in tables.items():
        every = np.arange(len(rows))
        values = column_values(
            rows.strings, rows.forms, rows.values, rows.lengths, rows.valid, every
        )
        sys_ops = rows.values[-1].tolist()
        made[name] = [DeltaRow(v, op) for v, op in zip(values, sys_ops, strict=True)]
    return made


def table_records(rows: DeltaTable) -> tuple[Any, Any]:
    """A table's rows as Avro records (`protocol.body_writer.column_records`), and where
    each ends. A REAL4 column's values, held as a double's bits (as the exact decoder's
    Python floats are), are written as a float's, as the writer writes a FLOAT from a
    Python float."""
    values = rows.values
    floats = [
        c for c, column in enumerate(rows.table.columns) if column.type.kind is TypeKind.FLOAT
    ]
    if floats:
        values = values.copy()
        single = values[floats].view(np.float64).astype(np.float32)
        values[floats] = single.view(np.uint32).astype(np.int64)
    return column_records(rows.table, values, rows.lengths, rows.valid, rows.strings)


def written(records: Any, ends: Any) -> Any:
    """The bytes `table_records` wrote (for `podd_cdc.rows.records_digest`)."""
    return records[: ends[-1] if len(ends) else 0]


def _delta_order(taken: HeldChanges) -> Any:
    """Each change's place in the delta's order. A full-load row sorts as (0, 0): below
    every sequence, which begins with a time."""
    high, low = (np.where(taken.refresh, 0, s) for s in taken.sequence)
    order = np.lexsort((taken.offset, taken.partition, low, high))
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank


def _block_rows(block: TableBlock, lines: Any, ranks: Any) -> tuple[DeltaTable, tuple[Any, Any]]:
    """The rows changes `lines` of a block make, their texts gathered, with each row's
    change's rank and its place among that change's rows."""
    table, made = block.table, block.made
    values, lengths, valid, where, befores = change_rows(table, made, lines)
    rank_of_line = np.zeros(len(made.messages), np.int64)
    rank_of_line[lines] = ranks
    sub = (np.arange(len(where)) >= befores).astype(np.int64)
    forms = forms_of(table)
    texts = [c for c, form in enumerate(forms) if form in TEXT_FORMS]
    strings = np.zeros(0, np.uint8)
    if texts:
        starts, sizes = values[texts], np.where(valid[texts], lengths[texts], 0)
        strings = np.empty(int(sizes.sum()), np.uint8)
        at = np.empty(sizes.size, np.int64)
        _gather(block.out, starts.reshape(-1), sizes.reshape(-1), strings, at)
        values[texts] = at.reshape(starts.shape)
        lengths[texts] = sizes
    rows = DeltaTable(table.table, forms, values, lengths, valid, strings)
    return rows, (rank_of_line[where], sub)


@numba.njit(cache=True, nogil=True)
def _gather(out: Any, starts: Any, sizes: Any, into: Any, at: Any) -> None:
    """`out[starts[k]:starts[k] + sizes[k]]` one after another into `into`, from `at[k]`."""
    pos = 0
    for k in range(starts.shape[0]):
        size = sizes[k]
        at[k] = pos
        into[pos : pos + size] = out[starts[k] : starts[k] + size]
        pos += size


def _joined(parts: list[DeltaTable]) -> DeltaTable:
    """One table's rows of several blocks as one, texts moved into one buffer."""
    first = parts[0]
    if len(parts) == 1:
        return first
    texts = [c for c, form in enumerate(first.forms) if form in TEXT_FORMS]
    shifted, shift = [], 0
    for part in parts:
        values = part.values
        if texts and shift:
            values = values.copy()
            values[texts] += shift
        shifted.append(values)
        shift += len(part.strings)
    return DeltaTable(
        first.table,
        first.forms,
        np.concatenate(shifted, axis=1),
        np.concatenate([p.lengths for p in parts], axis=1),
        np.concatenate([p.valid for p in parts], axis=1),
        np.concatenate([p.strings for p in parts]),
    )


def _last_per_key(rows: DeltaTable, rank: Any, sub: Any) -> DeltaTable:
    """Of `rows`, the last to each key by (rank, sub), in that order."""
    codes = [_key_codes(rows, c) for c in rows.table.key_positions]
    order = np.lexsort((sub, rank, *codes[::-1]))
    same_as_next = np.ones(len(order), np.bool_)
    same_as_next[-1:] = False
    for code in codes:
        ranked = code[order]
        same_as_next[:-1] &= ranked[1:] == ranked[:-1]
    last = order[~same_as_next]
    kept = last[np.lexsort((sub[last], rank[last]))]
    return DeltaTable(
        rows.table,
        rows.forms,
        rows.values[:, kept],
        rows.lengths[:, kept],
        rows.valid[:, kept],
        rows.strings,
    )


def _key_codes(rows: DeltaTable, column: int) -> Any:
    """Equal numbers for keys Python finds equal, in column `column`."""
    values, form = rows.values[column], rows.forms[column]
    if form in TEXT_FORMS:
        starts = values
        first, same = distinct_texts(rows.strings, starts, starts + rows.lengths[column])
        alone = np.nonzero(same < 0)[0]
        if len(alone):  # a hash shared by other bytes: these are numbered by their bytes
            texts = [rows.strings[s : s + n].tobytes() for s, n in _spans(rows, column, alone)]
            numbered: dict[bytes, int] = {}
            for k, text in zip(alone.tolist(), texts, strict=True):
                same[k] = len(first) + numbered.setdefault(text, len(numbered))
        return same
    if form == "real":
        floats: dict[float, int] = {}
        return np.array(
            [floats.setdefault(v, len(floats)) for v in values.view(np.float64).tolist()],
            np.int64,
        )
    return values


def _spans(rows: DeltaTable, column: int, which: Any) -> list[tuple[int, int]]:
    starts, sizes = rows.values[column, which], rows.lengths[column, which]
    return list(zip(starts.tolist(), sizes.tolist(), strict=True))


def _side_rows(columns: Columns, rows: Any, sys_op: int) -> tuple[Any, Any, Any]:
    """values, lengths, valid of `rows` of `columns`, with `sys_op` as the last column."""
    width, count = columns.values.shape[0] + 1, len(rows)
    values, lengths = np.zeros((width, count), np.int64), np.zeros((width, count), np.int64)
    valid = np.ones((width, count), np.bool_)
    values[:-1], lengths[:-1] = columns.values[:, rows], columns.lengths[:, rows]
    valid[:-1] = columns.valid[:, rows]
    values[-1] = sys_op
    return values, lengths, valid


def change_rows(table: MappedTable, made: RowImages, lines: Any) -> tuple[Any, Any, Any, Any, int]:
    """The rows changes `lines` make, the line each row is of, and how many of them, first,
    are the deletes of an upsert's old row (`RowImages.old_deleted`; Qlik: a `beforeData`
    with a field). `MappedTable.changes` deletes the old key of an upsert only where the key
    moved; here every such old row is deleted, and where the key did not move, the upsert
    after it in the same change supersedes that delete (`_last_per_key`), so which keys are
    equal is decided in one place, `_key_codes`."""
    deleted = made.deleting(lines)
    upserts, gone = lines[~deleted], lines[deleted]
    after = _side_rows(made.data, upserts, 0)
    olds = upserts[made.old_deleted(upserts)]
    old = _side_rows(made.before, olds, 1)
    removed = [
        np.where(made.before_gone(gone), b, d)
        for b, d in zip(
            _side_rows(made.before, gone, 1), _side_rows(made.data, gone, 1), strict=True
        )
    ]
    values, lengths, valid = (
        np.concatenate([o, d, a], axis=1) for o, d, a in zip(old, removed, after, strict=True)
    )
    return values, lengths, valid, np.concatenate([olds, gone, upserts]), len(olds)
