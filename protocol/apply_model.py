"""The apply semantics of PROTOCOL.md ("Semantics of applying delta N") as a reference model.

Pure Python over plain tuples, written for clarity, not speed: later tests use it as the
oracle for the loader. Rows are the column values in logical order; a delta's rows of one
table are given in order (chunk number, then position in the chunk).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from protocol.schema import LogicalSchema, Table
from protocol.sequence import expected_next

Key = tuple[Any, ...]
UPSERT = 0
DELETE = 1


class DeltaRow(msgspec.Struct, frozen=True, gc=False):
    """One row of a delta body: the column values, then `sys_op`.

    A msgspec struct outside the cyclic collector: an origin makes one per row of a delta
    (100,000 and more at once), a frozen dataclass cost ten times as much to make, and a
    row holds only its values, so it is never part of a reference cycle."""

    values: tuple[Any, ...]
    sys_op: int


@dataclass(frozen=True)
class Version:
    """One row of `t_actual` (sys_to None) or `t_history`."""

    values: tuple[Any, ...]
    sys_from: int
    sys_to: int | None
    sys_op: int


@dataclass(frozen=True)
class TableCounts:
    """The per-table figures of `delta.in.rs` (`TableResult`)."""

    table_name: str
    rows_received: int
    rows_upserted: int
    rows_deleted: int


@dataclass
class TableVersions:
    """The replica's rows of one table: current versions by key, and closed versions."""

    actual: dict[Key, Version] = field(default_factory=dict)
    history: list[Version] = field(default_factory=list)

    def copy(self) -> TableVersions:
        return TableVersions(dict(self.actual), list(self.history))


@dataclass
class ReplicaModel:
    """A whole datamart replica: every table's versions and the applied deltas."""

    schema: LogicalSchema
    tables: dict[str, TableVersions] = field(default_factory=dict)
    applied: list[tuple[int, datetime]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for table in self.schema:
            self.tables.setdefault(table.name, TableVersions())

    @property
    def expected_delta_num(self) -> int:
        return expected_next(self.applied[-1][0] if self.applied else None)


def key_of(table: Table, values: Sequence[Any]) -> Key:
    return tuple(values[i] for i in table.key_positions)


def last_row_per_key(table: Table, rows: Iterable[DeltaRow]) -> dict[Key, DeltaRow]:
    """The row that wins for each key: the last one (exact duplicates collapse with it)."""
    winners: dict[Key, DeltaRow] = {}
    for row in rows:
        winners[key_of(table, row.values)] = row
    return winners


def apply_table_delta(
    table: Table, state: TableVersions, delta_num: int, rows: Sequence[DeltaRow]
) -> tuple[TableVersions, TableCounts]:
    """The table's versions after delta `delta_num`, and the counts of its result."""
    new = state.copy()
    upserted = deleted = 0
    for key, row in last_row_per_key(table, rows).items():
        current = new.actual.get(key)
        if row.sys_op == UPSERT:
            if current is not None:
                new.history.append(Version(current.values, current.sys_from, delta_num - 1, UPSERT))
            new.actual[key] = Version(row.values, delta_num, None, UPSERT)
            upserted += 1
        elif row.sys_op == DELETE:
            if current is not None:
                new.history.append(Version(current.values, current.sys_from, delta_num - 1, DELETE))
                del new.actual[key]
                deleted += 1
        else:
            raise ValueError(f"sys_op {row.sys_op} is not 0 or 1")
    return new, TableCounts(table.name, len(rows), upserted, deleted)


def apply_delta(
    replica: ReplicaModel,
    delta_num: int,
    delta_date: datetime,
    rows_by_table: Mapping[str, Sequence[DeltaRow]],
) -> tuple[ReplicaModel, list[TableCounts]]:
    """The replica after applying delta `delta_num`; every table of the schema takes part."""
    if delta_num != replica.expected_delta_num:
        raise ValueError(f"delta {delta_num} is not the expected {replica.expected_delta_num}")
    unknown = set(rows_by_table) - {t.name for t in replica.schema}
    if unknown:
        raise ValueError(f"tables not in the schema: {sorted(unknown)}")
    tables: dict[str, TableVersions] = {}
    counts: list[TableCounts] = []
    for table in replica.schema:
        rows = rows_by_table.get(table.name, ())
        tables[table.name], table_counts = apply_table_delta(
            table, replica.tables[table.name], delta_num, rows
        )
        counts.append(table_counts)
    applied = [*replica.applied, (delta_num, delta_date)]
    return ReplicaModel(replica.schema, tables, applied), counts


def state_as_of(state: TableVersions, n: int) -> list[Version]:
    """REPLICA.md's read as of delta `n`: the versions live at `n`."""
    live = [v for v in state.actual.values() if v.sys_from <= n]
    live += [v for v in state.history if v.sys_from <= n and v.sys_to is not None and v.sys_to >= n]
    return live


def rows_as_of(state: TableVersions, n: int) -> set[tuple[Any, ...]]:
    """The table's logical rows as of delta `n` (values only)."""
    return {v.values for v in state_as_of(state, n)}
