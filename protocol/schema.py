"""The logical schema: a datamart's tables as Prostore DDL declares them.

These models are what every layer checks wire names against; SQL identifiers are only ever
built from them, through `quote_ident`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, model_validator

from protocol.errors import UnknownTableError
from protocol.types import ColumnType

#: Columns the replica adds to every table (REPLICA.md "Physical layout").
SYSTEM_COLUMNS = ("sys_from", "sys_to", "sys_op")
#: The suffixes of the physical tables; the longer bounds the length of a table name.
PHYSICAL_SUFFIXES = ("_actual", "_history")
#: PostgreSQL truncates identifiers longer than this many bytes.
MAX_IDENTIFIER_BYTES = 63


def check_name(kind: str, name: str) -> str:
    """`name` if it can be a replica identifier: not empty, at most 63 bytes (PostgreSQL
    would cut it), no control character, no `$` (the replica's functions are `$podd$`-
    quoted: a name holding that could end one early). ValueError otherwise."""
    if not name:
        raise ValueError(f"{kind} name is empty")
    if len(name.encode()) > MAX_IDENTIFIER_BYTES:
        raise ValueError(f"{kind} name {name[:80]!r} is longer than {MAX_IDENTIFIER_BYTES} bytes")
    bad = next((c for c in name if c == "$" or ord(c) < 32 or 127 <= ord(c) < 160), None)
    if bad is not None:
        raise ValueError(f"{kind} name {name[:80]!r} holds {bad!r}, which names may not hold")
    return name


def quote_ident(name: str) -> str:
    """Quote `name` as a PostgreSQL identifier (doubling embedded quotes)."""
    if "\x00" in name:
        raise ValueError("identifier contains NUL")
    return '"' + name.replace('"', '""') + '"'


class _SchemaModel(BaseModel):
    """Frozen, and copies are validated anew.

    pydantic's own `model_copy` copies the instance dict, cached properties included, and
    skips validation: a copy with other tables would still find the old ones.
    """

    model_config = ConfigDict(frozen=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        del deep  # the models are immutable: sharing parts is safe
        values = {name: getattr(self, name) for name in type(self).model_fields}
        values.update(update or {})
        return type(self).model_validate(values)


class Column(_SchemaModel):
    name: str
    type: ColumnType
    not_null: bool = False

    @model_validator(mode="after")
    def _check(self) -> Column:
        check_name("column", self.name)
        return self

    @property
    def nullable(self) -> bool:
        return not self.not_null


class Table(_SchemaModel):
    """One logical table: columns in body order, primary key, distribution key."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    distributed_by: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> Table:
        check_name("table", self.name)
        names = [c.name for c in self.columns]
        if not names:
            raise ValueError(f"table {self.name} has no columns")
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise ValueError(f"table {self.name}: column {name} is declared twice")
            if name in SYSTEM_COLUMNS:
                raise ValueError(f"table {self.name}: column name {name} is reserved")
            seen.add(name)
        if not self.primary_key:
            raise ValueError(f"table {self.name} has no primary key")
        for key in (*self.primary_key, *self.distributed_by):
            if key not in seen:
                raise ValueError(f"table {self.name}: key column {key} is not a column")
        if len(set(self.primary_key)) != len(self.primary_key):
            raise ValueError(f"table {self.name}: primary key names a column twice")
        longest = max(len(s) for s in PHYSICAL_SUFFIXES)
        if len(self.name.encode()) + longest > MAX_IDENTIFIER_BYTES:
            raise ValueError(
                f"table name {self.name} is too long: at most "
                f"{MAX_IDENTIFIER_BYTES - longest} bytes, so that {self.name}_history fits"
            )
        return self

    @cached_property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @cached_property
    def key_positions(self) -> tuple[int, ...]:
        """Positions of the primary key columns, in key order."""
        return tuple(self.column_names.index(k) for k in self.primary_key)

    def column(self, name: str) -> Column:
        return self.columns[self.column_names.index(name)]


class LogicalSchema(_SchemaModel):
    """All tables of one datamart, in declaration order."""

    datamart: str
    tables: tuple[Table, ...]

    @model_validator(mode="after")
    def _check(self) -> LogicalSchema:
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            raise ValueError(f"datamart {self.datamart} declares a table twice")
        check_name("datamart", self.datamart)
        return self

    def __iter__(self) -> Iterator[Table]:  # type: ignore[override]
        return iter(self.tables)

    @cached_property
    def _by_name(self) -> dict[str, Table]:
        return {t.name: t for t in self.tables}

    def table(self, name: str) -> Table:
        """The table named `name` (as sent in `tableName`), else `UNKNOWN_TABLE`."""
        table = self._by_name.get(name)
        if table is None:
            raise UnknownTableError(
                f"table {name!r} is not in the logical schema of datamart {self.datamart}"
            )
        return table

    def has_table(self, name: str) -> bool:
        return name in self._by_name

    def to_ddl(self) -> str:
        """Prostore DDL that `protocol.ddl.parse_schema` reads back to an equal schema."""
        return "\n".join(table_ddl(self.datamart, t) for t in self.tables)


def _ddl_ident(name: str) -> str:
    plain = name.isidentifier() and name.isascii() and name == name.lower()
    return name if plain else quote_ident(name)


def table_ddl(datamart: str, table: Table) -> str:
    """One table's `CREATE TABLE` statement, as `to_ddl` writes it."""
    lines = [
        f"  {_ddl_ident(c.name)} {c.type.to_prostore()}{' NOT NULL' if c.not_null else ''},"
        for c in table.columns
    ]
    pk = ", ".join(_ddl_ident(k) for k in table.primary_key)
    lines.append(f"  PRIMARY KEY ({pk})")
    tail = ""
    if table.distributed_by:
        tail = " DISTRIBUTED BY (" + ", ".join(_ddl_ident(k) for k in table.distributed_by) + ")"
    head = f"CREATE TABLE {_ddl_ident(datamart)}.{_ddl_ident(table.name)} (\n"
    return head + "\n".join(lines) + f"\n){tail};"
