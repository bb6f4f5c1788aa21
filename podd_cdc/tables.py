"""A source table mapped onto the replica: names, types, key, and the check against the
replica's logical schema (docs/contracts/CDC.md "Schema" and "Names").

Names are lower-cased, and must then be plain identifiers (letters, digits, `_`, not starting
with a digit, at most 63 bytes): nothing a source sends becomes SQL unless it is one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import InvalidOperation
from typing import Any

from pydantic import ValidationError

from podd_cdc.errors import BadInput, SchemaStop, TableRefused
from podd_cdc.records import RowChange
from podd_cdc.values import Converter, SourceColumn, convert_value
from protocol.schema import Column, LogicalSchema, Table

_PLAIN = re.compile(r"[a-z_][a-z0-9_]{0,62}\Z")
#: DataWorks' hidden row id of a table without a primary key, and its name in the replica.
DATAWORKS_ROW_ID = "__#alibaba_rds_row_id#__"
ROW_ID_COLUMN = "alibaba_rds_row_id"


def replica_name(source: str) -> str:
    """The replica's name for a source table or column name, or BadInput."""
    if source == DATAWORKS_ROW_ID:
        return ROW_ID_COLUMN
    name = source.lower()
    if not _PLAIN.match(name):
        raise TableRefused(None, f"the name {source[:80]!r} is not a plain identifier")
    return name


@dataclass(frozen=True)
class MappedTable:
    """A source table as the replica holds it; `columns` in the replica's column order."""

    table: Table
    columns: tuple[MappedColumn, ...]
    _plan: tuple[tuple[str, Converter], ...] = field(init=False, repr=False, compare=False)
    _keys: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "_plan", tuple((c.source_name, c.mapped.fast()) for c in self.columns)
        )
        object.__setattr__(self, "_keys", self.table.key_positions)

    @property
    def name(self) -> str:
        return self.table.name

    def row(self, source_row: Mapping[str, Any], what: str) -> tuple[Any, ...]:
        """One source row (column name → value) as the replica's values, in column order.
        Every column must be present (None for SQL NULL)."""
        try:
            values = tuple([convert(source_row[name]) for name, convert in self._plan])
        except (KeyError, ValueError, TypeError, OverflowError, InvalidOperation):
            values = self._strict_row(source_row, what)  # raises, naming the column
        if len(source_row) > len(self.columns):
            extra = sorted(set(source_row) - {c.source_name for c in self.columns})
            raise BadInput(None, f"{what} of table {self.name} has unknown columns {extra[:5]}")
        return values

    def _strict_row(self, source_row: Mapping[str, Any], what: str) -> tuple[Any, ...]:
        values = []
        for column in self.columns:
            if column.source_name not in source_row:
                raise BadInput(None, f"{what} of table {self.name} has no column {column.name}")
            try:
                values.append(convert_value(column.mapped, source_row[column.source_name]))
            except ValueError as exc:
                raise BadInput(None, f"{what} of table {self.name}: {exc}") from None
        return tuple(values)

    def key_row(self, source_row: Mapping[str, Any], what: str) -> tuple[Any, ...]:
        """A deleted row: the key columns must be present; other columns are kept where the
        source gave them, else NULL."""
        keys = set(self.table.primary_key)
        values = []
        for column in self.columns:
            if column.source_name not in source_row and column.name in keys:
                raise BadInput(None, f"{what} of table {self.name} has no key column {column.name}")
            try:
                values.append(convert_value(column.mapped, source_row.get(column.source_name)))
            except ValueError as exc:
                raise BadInput(None, f"{what} of table {self.name}: {exc}") from None
        return tuple(values)

    def key_of(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple([values[i] for i in self._keys])

    def upsert(self, values: tuple[Any, ...]) -> RowChange:
        for i in self._keys:
            if values[i] is None:
                raise BadInput(None, f"a row of table {self.name} has a NULL key column")
        return RowChange(self.name, 0, values)

    def delete(self, values: tuple[Any, ...]) -> RowChange:
        for i in self._keys:
            if values[i] is None:
                raise BadInput(None, f"a delete of table {self.name} has a NULL key column")
        return RowChange(self.name, 1, values)

    def changes(
        self, before: tuple[Any, ...] | None, after: tuple[Any, ...]
    ) -> tuple[RowChange, ...]:
        """An update: the upsert of `after`, after a delete of the old key if it changed."""
        if before is not None and self.key_of(before) != self.key_of(after):
            return (self.delete(before), self.upsert(after))
        return (self.upsert(after),)


@dataclass(frozen=True)
class MappedColumn:
    source_name: str
    mapped: SourceColumn

    @property
    def name(self) -> str:
        return self.mapped.name


def map_table(
    source_table: str, columns: Sequence[SourceColumn], key: Sequence[str], what: str
) -> tuple[Table, tuple[MappedColumn, ...]]:
    """The replica's `Table` for a source table; BadInput if it cannot be one."""
    name = replica_name(source_table)
    if not key:
        raise TableRefused(None, f"{what}: table {source_table} has no primary key")
    mapped = tuple(MappedColumn(c.name, replace(c, name=replica_name(c.name))) for c in columns)
    key_names = tuple(replica_name(k) for k in key)
    # Key columns are NOT NULL; every other column may be NULL (sources do not say).
    table_columns = tuple(
        Column(name=c.name, type=c.mapped.type, not_null=c.name in key_names) for c in mapped
    )
    try:
        table = Table(
            name=name, columns=table_columns, primary_key=key_names, distributed_by=key_names
        )
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise TableRefused(None, f"{what}: table {source_table}: {reason}") from None
    return table, mapped


class SourceNames:
    """Which source table each replica name came from: two sources on one name are refused
    (two databases' `SALES` and `sales` would overwrite each other's rows)."""

    def __init__(self) -> None:
        self._sources: dict[str, str] = {}

    def claim(self, name: str, source: str) -> None:
        known = self._sources.setdefault(name, source)
        if known != source:
            raise TableRefused(None, f"two source tables map to table {name}: {known} and {source}")


def describe(table: Table) -> str:
    columns = ", ".join(f"{c.name} {c.type.to_prostore()}" for c in table.columns)
    return f"({columns}) key ({', '.join(table.primary_key)})"


def check_against(expected: LogicalSchema | None, table: Table) -> None:
    """A derived table must be the replica's table of that name: the same columns, types,
    order and key. Not in the schema: BadInput; different: SchemaStop naming both."""
    if expected is None:
        return
    if not expected.has_table(table.name):
        raise BadInput(
            None, f"table {table.name} is not in the replica's schema of {expected.datamart}"
        )
    replica = expected.table(table.name)
    same = [(c.name, c.type) for c in replica.columns] == [(c.name, c.type) for c in table.columns]
    if not same or replica.primary_key != table.primary_key:
        raise SchemaStop(
            None,
            f"table {table.name} changed: the replica has {describe(replica)}, "
            f"the source now has {describe(table)}",
        )
