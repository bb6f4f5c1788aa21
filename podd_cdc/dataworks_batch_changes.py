"""The changes and heartbeats of a read DataWorks batch, on arrays: each message's operation,
`sequenceId` and eventTime from its head (`podd_cdc.dataworks_batch_kernel`), and its images
as columns (`podd_cdc.qlik_columns`, the same conversion the Qlik batch has).

A message is `sure` only where the exact decoder (`DataWorksDecoder.decode`) would make a
change of it with exactly these values: an id and an eventTime that are whole numbers (the
time no later than year 9999), and the images its operation reads, each a row of its table
(an upsert's `after` whole, with its key; an `UPDATE_AFTER`'s `before`, if given, and a
delete's, with its key; neither key NULL). Anything else is the exact decoder's to decide.
`change` makes one message's `Change` as the exact decoder does, for the tests that hold the
two together and for a caller that needs one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from podd_cdc import dataworks_batch_kernel as kernel
from podd_cdc.dataworks import MAX_EVENT_MILLIS, change_of
from podd_cdc.dataworks_batch import DataWorksBatch
from podd_cdc.qlik_columns import Columns, python_rows, tables_sides
from podd_cdc.records import Change, RowChange
from podd_cdc.tables import MappedTable


@dataclass(frozen=True)
class DataWorksChanges:
    """The changes of `messages` (of one table), a line a message."""

    messages: Any
    operation: Any  # the kernel's INSERT .. DELETE
    sequence: Any  # `sequenceId`
    event_ms: Any  # `timestamp.eventTime`
    data: Columns  # `after`
    before: Columns
    has_before: Any  # a `before` image given (an `UPDATE_AFTER` then deletes its key first)
    sure: Any

    @property
    def half(self) -> Any:
        """Each line's place in its `sequenceId`'s pair (the exact decoder's order): 0 for
        `UPDATE_BEFOR`, 1 for the rest."""
        return (self.operation != kernel.UPDATE_BEFOR).astype(np.int64)

    # The rows each line makes (`qlik_delta_rows.RowImages`): an upsert writes `after`, an
    # `UPDATE_AFTER` with a `before` deletes that key first, a delete deletes `before`.
    def deleting(self, lines: Any) -> Any:
        operation = self.operation[lines]
        return (operation == kernel.UPDATE_BEFOR) | (operation == kernel.DELETE)

    def old_deleted(self, upserts: Any) -> Any:
        return (self.operation[upserts] == kernel.UPDATE_AFTER) & self.has_before[upserts]

    def before_gone(self, deletes: Any) -> Any:
        return np.ones(len(deletes), np.bool_)


def _timed(batch: DataWorksBatch, messages: Any) -> Any:
    """Where a message's eventTime is a whole number of ms the exact decoder takes."""
    heads = batch.heads[messages]
    return batch.has(kernel.HAS_EVENT)[messages] & (heads[:, kernel.M_EVENT] <= MAX_EVENT_MILLIS)


def _rows_sure(
    batch: DataWorksBatch, table: MappedTable, messages: Any, after: Columns, before: Columns
) -> Any:
    """Where the images make the exact decoder's rows: an upsert's `after` given, whole,
    its key not NULL, and an `UPDATE_AFTER`'s `before`, if given, keyed; a delete's `before`
    given and keyed (its key given and not NULL, every field it gives converted)."""
    keys = list(table.table.key_positions)
    operation = batch.heads[messages, kernel.M_OP]
    has_after = batch.has(kernel.HAS_AFTER)[messages]
    has_before = batch.has(kernel.HAS_BEFORE)[messages]

    def keyed(row: Columns) -> Any:
        return row.sure & row.given[keys].all(axis=0) & row.valid[keys].all(axis=0)

    whole_after = keyed(after) & after.given.all(axis=0)
    before_read = operation == kernel.UPDATE_AFTER
    upsert = has_after & whole_after & (~(has_before & before_read) | keyed(before))
    delete = has_before & keyed(before)
    upserting = (operation == kernel.INSERT) | (operation == kernel.UPDATE_AFTER)
    deleting = (operation == kernel.UPDATE_BEFOR) | (operation == kernel.DELETE)
    return np.where(upserting, upsert, deleting & delete)


def tables_changes(
    batch: DataWorksBatch, groups: Sequence[tuple[MappedTable, Any]]
) -> list[DataWorksChanges]:
    """The changes of each (table, its messages: read, of that table's schema) of a read
    batch, every table's images converted at once (`tables_sides`)."""
    sides = tables_sides(batch, groups)
    made = []
    for (table, messages), (after, before) in zip(groups, sides, strict=True):
        heads = batch.heads[messages]
        numbered = batch.has(kernel.HAS_SEQUENCE)[messages]
        sure = numbered & _timed(batch, messages)
        sure &= _rows_sure(batch, table, messages, after, before)
        made.append(
            DataWorksChanges(
                messages,
                heads[:, kernel.M_OP],
                heads[:, kernel.M_SEQUENCE],
                heads[:, kernel.M_EVENT],
                after,
                before,
                batch.has(kernel.HAS_BEFORE)[messages],
                sure,
            )
        )
    return made


def heartbeats(batch: DataWorksBatch, placed: Any) -> tuple[Any, Any]:
    """The heartbeats the batch is sure of (their places in it) and their eventTimes (ms):
    read, timed, and with a schema that is null or one learnt (`placed`, of
    `dataworks_batch.tables_of`: a schema not learnt has unread bytes)."""
    heads = batch.heads
    beating = batch.read & (heads[:, kernel.M_OP] == kernel.HEARTBEAT)
    beating &= (heads[:, kernel.M_SCHEMA] < 0) | (placed >= 0)
    messages = np.nonzero(beating)[0]
    messages = messages[_timed(batch, messages)]
    return messages, heads[messages, kernel.M_EVENT]


def markers(batch: DataWorksBatch, placed: Any) -> Any:
    """The markers that change no row the batch is sure of (their places in it): read, with
    a schema that is null or one learnt (the exact decoder counts them, `Skipped`)."""
    heads = batch.heads
    marking = batch.read & (heads[:, kernel.M_OP] >= kernel.FIRST_MARKER)
    return np.nonzero(marking & ((heads[:, kernel.M_SCHEMA] < 0) | (placed >= 0)))[0]


def change(batch: DataWorksBatch, table: MappedTable, changes: DataWorksChanges, r: int) -> Change:
    """The `Change` of sure line `r`, as the exact decoder makes it."""
    operation = int(changes.operation[r])
    (old,) = python_rows(batch, table, changes.before, [r])
    rows: tuple[RowChange, ...]
    if operation in (kernel.INSERT, kernel.UPDATE_AFTER):
        (after,) = python_rows(batch, table, changes.data, [r])
        keyed = old if operation == kernel.UPDATE_AFTER and changes.has_before[r] else None
        rows = table.changes(keyed, after)
    else:
        rows = (table.delete(old),)
    name = kernel.OPERATIONS[operation]
    return change_of(rows, name, int(changes.sequence[r]), int(changes.event_ms[r]))
