"""A batch of DataWorks JSON messages read by the compiled kernel
(`podd_cdc.dataworks_batch_kernel`): the arrays it fills, each message's table found by its
schema's bytes, and what one message read says, in Python's terms.

A message's `schema` is not read by the kernel: its bytes are compared with the schemas the
decoder has learnt (`DataWorksDecoder.known_table`, from a message it read whole). A schema
it has not learnt leaves its messages to the exact decoder, which learns it; the messages
after it are then the batch's again. So the batch reads no schema itself, and never learns a
table before the message the exact decoder would learn it from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from podd_cdc import dataworks_batch_kernel as kernel
from podd_cdc.qlik_batch import distinct_texts, message_fields, output_arrays, row_fields
from podd_cdc.tables import MappedTable
from podd_kafka.record_columns import JoinedValues, values_at

_WORDS = kernel.word_table()


@dataclass(frozen=True)
class ReadDataWorks:
    """What one message read by the kernel says: its operation, its id and eventTime where
    they are whole numbers, its schema's bytes (None where null or not given), and each
    image's fields in the order written (None where the image is null or not given)."""

    operation: str
    sequence: int | None
    event_ms: int | None
    schema: bytes | None
    after: list[tuple[str, Any]] | None
    before: list[tuple[str, Any]] | None


@dataclass(frozen=True)
class DataWorksBatch:
    """The kernel's arrays for one batch: the messages' bytes (`buf`, where the schemas
    stand), the texts (`out`), a line a message, a line a field."""

    buf: Any
    out: Any
    heads: Any
    fields: Any
    field_starts: Any  # message m's fields are lines field_starts[m] to field_starts[m + 1]

    @property
    def read(self) -> Any:
        """Which messages the kernel read (the rest are the exact path's)."""
        return self.heads[:, kernel.M_OK] == 1

    def has(self, bit: int) -> Any:
        """Which messages hold what `bit` (a `HAS_*` of the kernel) says."""
        return (self.heads[:, kernel.M_HAS] & bit) != 0

    def message(self, m: int) -> ReadDataWorks | None:
        """Message `m` as the kernel read it; None if it was not read."""
        head = self.heads[m].tolist()
        if head[kernel.M_OK] != 1:
            return None
        has = head[kernel.M_HAS]
        lines = self.fields[self.field_starts[m] : self.field_starts[m + 1]]
        schema = head[kernel.M_SCHEMA]
        return ReadDataWorks(
            operation=kernel.OPERATIONS[head[kernel.M_OP]],
            sequence=head[kernel.M_SEQUENCE] if has & kernel.HAS_SEQUENCE else None,
            event_ms=head[kernel.M_EVENT] if has & kernel.HAS_EVENT else None,
            schema=None if schema < 0 else self.buf[schema : head[kernel.M_SCHEMA_END]].tobytes(),
            after=row_fields(self.out, lines, 0) if has & kernel.HAS_AFTER else None,
            before=row_fields(self.out, lines, 1) if has & kernel.HAS_BEFORE else None,
        )


def read_batch(messages: list[bytes], allocate: Callable[..., Any] = np.empty) -> DataWorksBatch:
    """`messages` read by the kernel into arrays made by `allocate` (`read_values`)."""
    return read_values(values_at([messages]), allocate)


def read_values(values: JoinedValues, allocate: Callable[..., Any] = np.empty) -> DataWorksBatch:
    """The messages `buf[starts[m]:ends[m]]` of `values` read by the kernel into arrays made
    by `allocate`. Memory: about 15 bytes of arrays a byte read, as the Qlik batch's."""
    buf, starts, ends = values
    out, heads, fields = output_arrays(len(buf), len(starts), kernel.HEAD_COLUMNS, allocate)
    used, count = kernel.read_batch(buf, starts, ends, *_WORDS, out, heads, fields)
    return DataWorksBatch(buf, out[:used], heads, *message_fields(fields[:count], len(starts)))


#: A learnt table by a schema's bytes, or None where the decoder has not learnt that schema.
KnownTable = Callable[[bytes], MappedTable | None]


def _sampled(buf: Any, starts: Any, ends: Any) -> Any:
    """A key for each text `buf[starts[k]:ends[k]]` (a message's schema), from its length
    and eight bytes at each of four places in it, not from all its bytes
    (`kernel.sampled_keys`): the texts grouped by it are then compared whole
    (`distinct_texts`), so two schemas it cannot tell apart only leave the second one's
    messages to the exact decoder; hashing every schema's bytes cost as much as comparing
    them."""
    return kernel.sampled_keys(buf, starts, ends)


@dataclass(frozen=True)
class SchemaGroups:
    """A batch's read messages with a schema, grouped by its bytes: what `tables_of` looks
    up, the same whatever the decoder has learnt (`dataworks_batch_intake` looks again
    after learning a table, without grouping again)."""

    given: Any  # the messages (their places in the batch)
    starts: Any  # where each one's schema begins in the batch's bytes
    ends: Any
    first: Any  # each group's first message (a place in `given`)
    same: Any  # each message's group, -1 where its bytes are not its group's first's


def schema_groups(batch: DataWorksBatch) -> SchemaGroups:
    """The batch's schemas grouped by a sampled key, then compared whole (`distinct_texts`)."""
    heads = batch.heads
    given = np.nonzero(batch.read & (heads[:, kernel.M_SCHEMA] >= 0))[0]
    starts, ends = heads[given, kernel.M_SCHEMA], heads[given, kernel.M_SCHEMA_END]
    first, same = (
        distinct_texts(batch.buf, starts, ends, _sampled(batch.buf, starts, ends))
        if len(given)
        else (given, given)
    )
    return SchemaGroups(given, starts, ends, first, same)


def tables_of(
    batch: DataWorksBatch, known: KnownTable, grouped: SchemaGroups | None = None
) -> tuple[list[MappedTable], Any]:
    """The tables the read messages' schemas name, and each message's place among them: -1
    where it was not read, has no schema, or one not learnt. Each distinct schema is looked
    up once; every message's schema is compared with it by its bytes, not only its hash (a
    hash can be made to collide). `grouped`: the batch's `schema_groups`, if made already."""
    grouped = schema_groups(batch) if grouped is None else grouped
    placed = np.full(len(batch.heads), -1, np.int64)
    if not len(grouped.given):
        return [], placed
    tables: list[MappedTable] = []
    number: dict[int, int] = {}  # a table's place in `tables`, by its id
    group_table = np.full(len(grouped.first), -1, np.int64)
    for g, k in enumerate(grouped.first.tolist()):
        table = known(batch.buf[grouped.starts[k] : grouped.ends[k]].tobytes())
        if table is not None:
            group_table[g] = number.setdefault(id(table), len(tables))
            if group_table[g] == len(tables):
                tables.append(table)
    same = grouped.same
    placed[grouped.given] = np.where(same >= 0, group_table[np.maximum(same, 0)], -1)
    return tables, placed
