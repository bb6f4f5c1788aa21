"""The changes of one table's messages in a read batch, on arrays: each message's operation,
sequence, source time and transaction from its headers (`podd_cdc.qlik_headers`' rules), and
its rows as columns (`podd_cdc.qlik_columns`).

A message is `sure` only where the exact decoder would make a change of it with exactly these
values; anything else (an operation Qlik does not write, a sequence that is not 35 digits
beginning with a time, a counter below 1 in a transaction, a time with a zone, a column the
mask says was not captured, a row not whole, a NULL key) is the exact decoder's to decide.
`change` makes one message's `Change` as the exact decoder does, for the tests that hold the
two together and for a caller that needs one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from podd_cdc import column_kernels, json_scan
from podd_cdc import qlik_batch_kernel as kernel
from podd_cdc.errors import BadInput
from podd_cdc.qlik_batch import QlikBatch, distinct_texts
from podd_cdc.qlik_columns import (
    Columns,
    both_sides,
    joined_messages,
    python_rows,
    tables_sides,
)
from podd_cdc.qlik_headers import SEQUENCE_WIDTH
from podd_cdc.records import Change, RowChange
from podd_cdc.tables import MappedTable
from podd_cdc.values import micros_time

#: Operation codes, as `OPERATIONS` spells them.
INSERT, UPDATE, REFRESH, DELETE = range(4)
OPERATIONS = ("INSERT", "UPDATE", "REFRESH", "DELETE")
_OPERATION_WORDS, _OPERATION_LENGTHS = json_scan.word_table(OPERATIONS)

#: Checks a `columnMask` for an operation as the exact decoder does (BadInput if a column
#: it needs was not captured): `QlikDecoder.mask_check`.
MaskCheck = Callable[[str, str], None]


@dataclass(frozen=True)
class TableChanges:
    """The changes of `messages` (of one table), a line a message."""

    messages: Any
    operation: Any  # INSERT .. DELETE
    sequence: tuple[Any, Any]  # its first 17 digits, its last 18: they sort as it does
    source_us: Any  # the `timestamp` header, µs since 1970 (valid where `timed`)
    timed: Any
    counter: Any
    last_in_transaction: Any
    data: Columns
    before: Columns
    sure: Any

    # The rows each line makes (`qlik_delta_rows.RowImages`): a delete's row is its
    # `beforeData` if that has a field, else its `data`; an upsert's `beforeData` with a
    # field is deleted first.
    def deleting(self, lines: Any) -> Any:
        return self.operation[lines] == DELETE

    def old_deleted(self, upserts: Any) -> Any:
        return self.before.fields[upserts] > 0

    def before_gone(self, deletes: Any) -> Any:
        return self.before.fields[deletes] > 0


def _texts(batch: QlikBatch, messages: Any, column: int) -> tuple[Any, Any, Any]:
    """Starts, ends and presence of a text header of `messages` (absent: an empty range)."""
    starts, ends = (a[messages] for a in batch.texts(column))
    given = starts >= 0
    return np.where(given, starts, 0), np.where(given, ends, 0), given


def _mask_checked(batch: QlikBatch, messages: Any, operation: Any, check_mask: MaskCheck) -> Any:
    """Where each message's `columnMask` (if any) holds what its operation needs. The
    masks a task writes are few: each distinct (mask, is a delete) is checked once, and
    every message's mask is compared with the one checked by its bytes, not only its hash."""
    starts, ends, given = _texts(batch, messages, kernel.M_MASK)
    deleting = operation == DELETE
    keys = column_kernels.text_hashes(batch.out, starts, ends) * 2 + deleting
    first, same = distinct_texts(batch.out, starts, ends, keys)
    verdicts = np.array(
        [
            _mask_good(check_mask, batch.out[starts[k] : ends[k]].tobytes(), bool(deleting[k]))
            for k in first.tolist()
        ],
        np.bool_,
    )
    return ~given | ((same >= 0) & verdicts[np.maximum(same, 0)])


def _mask_good(check_mask: MaskCheck, mask: bytes, deleting: bool) -> bool:
    try:
        check_mask(mask.decode(), "DELETE" if deleting else "INSERT")
    except BadInput:
        return False
    return True


def _rows_sure(table: MappedTable, operation: Any, data: Columns, before: Columns) -> Any:
    """Where the rows make the exact decoder's change (`QlikDecoder._data`): an upsert's
    `data` an object, whole, its key not NULL, and its `beforeData`, if that has a field,
    the same; a delete's row (`beforeData` if that has a field, else `data`) an object with
    its key, not NULL, and every field it gives converted."""
    keys = list(table.table.key_positions)
    has_before = before.fields > 0

    def keyed(row: Columns) -> Any:
        return row.sure & row.given[keys].all(axis=0) & row.valid[keys].all(axis=0)

    def whole(row: Columns) -> Any:
        return keyed(row) & row.given.all(axis=0)

    upsert = whole(data) & (~has_before | whole(before))  # (a null row gives no column)
    delete = np.where(has_before, keyed(before), keyed(data))
    return np.where(operation == DELETE, delete, upsert)


@dataclass(frozen=True)
class Headers:
    """The headers of some read messages, a line each."""

    operation: Any  # INSERT .. DELETE; -1: not one Qlik writes
    sequence: tuple[Any, Any]
    source_us: Any
    timed: Any  # a time given, and read
    counter: Any  # 0 outside a transaction
    last_in_transaction: Any
    sure: Any  # the exact decoder reads the same of them

    def __getitem__(self, which: Any) -> Headers:
        high, low = self.sequence
        return Headers(
            self.operation[which],
            (high[which], low[which]),
            self.source_us[which],
            self.timed[which],
            self.counter[which],
            self.last_in_transaction[which],
            self.sure[which],
        )


def headers_of(batch: QlikBatch, messages: Any) -> Headers:
    """The headers of `messages` (read), as `podd_cdc.qlik_headers` reads them."""
    heads = batch.heads[messages]
    count = len(messages)
    operation = np.full(count, -1, np.int64)
    starts, ends, _ = _texts(batch, messages, kernel.M_OP)
    column_kernels.operations(
        batch.out, starts, ends, _OPERATION_WORDS, _OPERATION_LENGTHS, operation
    )
    high, low = np.zeros(count, np.int64), np.zeros(count, np.int64)
    in_order = np.zeros(count, np.bool_)
    starts, ends, _ = _texts(batch, messages, kernel.M_SEQ)
    column_kernels.sequences(batch.out, starts, ends, high, low, in_order)
    source_us, timed = np.zeros(count, np.int64), np.zeros(count, np.bool_)
    starts, ends, has_time = _texts(batch, messages, kernel.M_TIME)
    column_kernels.timestamps(batch.out, starts, ends, source_us, timed)
    _, _, in_transaction = _texts(batch, messages, kernel.M_TX)
    counter = heads[:, kernel.M_COUNTER]
    counted = (heads[:, kernel.M_HAS] & kernel.HAS_COUNTER != 0) & (counter >= 1)
    # A REFRESH row carries no sequence, time or transaction (`header_change`).
    headers_sure = in_order & (timed | ~has_time) & (counted | ~in_transaction)
    return Headers(
        operation,
        (high, low),
        source_us,
        timed & has_time,
        np.where(in_transaction, counter, 0),
        ~in_transaction | (heads[:, kernel.M_LAST] == 1),
        (operation >= 0) & (headers_sure | (operation == REFRESH)),
    )


def changes_of(
    batch: QlikBatch,
    table: MappedTable,
    messages: Any,
    check_mask: MaskCheck,
    read: tuple[Headers, tuple[Columns, Columns]] | None = None,
) -> TableChanges:
    """The changes of `messages` (read, of `table`); `read`: their headers and rows, where
    the caller read them already with other tables' (`tables_changes`)."""
    if read is None:
        read = headers_of(batch, messages), both_sides(batch, table, messages)
    headers, (data, before) = read
    sure = headers.sure & _mask_checked(batch, messages, headers.operation, check_mask)
    sure &= _rows_sure(table, headers.operation, data, before)
    return TableChanges(
        messages,
        headers.operation,
        headers.sequence,
        headers.source_us,
        headers.timed,
        headers.counter,
        headers.last_in_transaction,
        data,
        before,
        sure,
    )


def tables_changes(
    batch: QlikBatch, groups: Sequence[tuple[MappedTable, Any, MaskCheck]]
) -> list[TableChanges]:
    """`changes_of` each (table, its messages, its mask check) of a read batch, the headers
    of every table's messages read at once, and their rows (`tables_sides`)."""
    counts = [len(messages) for _, messages, _ in groups]
    headers = headers_of(batch, joined_messages([m for _, m, _ in groups]))
    sides = tables_sides(batch, [(table, messages) for table, messages, _ in groups])
    starts = np.cumsum([0, *counts])[:-1].tolist()
    return [
        changes_of(batch, table, messages, check, (headers[start : start + count], of))
        for (table, messages, check), of, start, count in zip(
            groups, sides, starts, counts, strict=True
        )
    ]


def _text_at(batch: QlikBatch, m: int, column: int) -> str | None:
    start, end = batch.heads[m, column : column + 2].tolist()
    return None if start < 0 else batch.out[start:end].tobytes().decode()


def change(batch: QlikBatch, table: MappedTable, changes: TableChanges, r: int) -> Change:
    """The `Change` of sure line `r`, as the exact decoder makes it."""
    (after,) = python_rows(batch, table, changes.data, [r])
    (old,) = python_rows(batch, table, changes.before, [r]) if changes.before.fields[r] else (None,)
    operation = int(changes.operation[r])
    rows: tuple[RowChange, ...]
    if operation == DELETE:
        rows = (table.delete(after if old is None else old),)
    else:
        rows = table.changes(old, after)
    if operation == REFRESH:
        return Change(rows, None, ("",), None)
    m = int(changes.messages[r])
    sequence = str(_text_at(batch, m, kernel.M_SEQ)).rjust(SEQUENCE_WIDTH, "0")
    order = (sequence,)
    transaction = _text_at(batch, m, kernel.M_TX)
    timed = bool(changes.timed[r])
    return Change(
        rows,
        sequence,
        order,
        order,
        micros_time(int(changes.source_us[r])) if timed else None,
        transaction,
        int(changes.counter[r]) if transaction is not None else None,
        bool(changes.last_in_transaction[r]),
    )
