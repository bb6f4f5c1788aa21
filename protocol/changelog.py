"""A datamart's schema history, as a Prostore backup's changelog carries it (BACKUP.md).

Each changelog record is one DDL statement with its `changeNum`. The logical schema at a
point of the history is the changes replayed in `changeNum` order: `CREATE TABLE` adds a
table, `DROP TABLE` removes it, `CREATE [MATERIALIZED] VIEW` and `DROP ... VIEW` add and
remove a view (recorded with its SQL, no data). `CREATE DATABASE` changes nothing. Other
statements are kept as `UNSUPPORTED` changes: they are reported, never guessed at.

Prostore writes `CREATE TABLE` statements with one closing parenthesis too many; the reader
drops closing parentheses that match nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum

from protocol.backup import ChangelogRecord
from protocol.ddl import parse_schema
from protocol.errors import SchemaDefinitionError
from protocol.schema import LogicalSchema, Table


class ChangeKind(StrEnum):
    CREATE_TABLE = "CREATE TABLE"
    DROP_TABLE = "DROP TABLE"
    CREATE_VIEW = "CREATE VIEW"
    DROP_VIEW = "DROP VIEW"
    DATABASE = "CREATE DATABASE"
    UNSUPPORTED = "UNSUPPORTED"


@dataclass(frozen=True)
class SchemaChange:
    change_num: int
    kind: ChangeKind
    name: str  # the table or view, unqualified ("" for DATABASE / UNSUPPORTED)
    query: str
    table: Table | None = None
    materialized: bool = False


_NAME = r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?([`\"\w.]+)"
_PATTERNS: tuple[tuple[ChangeKind, re.Pattern[str]], ...] = (
    (ChangeKind.DROP_TABLE, re.compile(rf"^\s*DROP\s+TABLE\s+{_NAME}", re.I)),
    (
        ChangeKind.CREATE_VIEW,
        re.compile(
            rf"^\s*(?:CREATE\s+(?:OR\s+REPLACE\s+)?|ALTER\s+)(MATERIALIZED\s+)?VIEW\s+{_NAME}", re.I
        ),
    ),
    (ChangeKind.DROP_VIEW, re.compile(rf"^\s*DROP\s+(MATERIALIZED\s+)?VIEW\s+{_NAME}", re.I)),
    (ChangeKind.DATABASE, re.compile(r"^\s*CREATE\s+DATABASE\b", re.I)),
)
_CREATE_TABLE = re.compile(r"^\s*CREATE\s+TABLE\b", re.I)


def without_stray_parentheses(query: str) -> str:
    """`query` without the closing parentheses that match no opening one (outside quotes)."""
    out: list[str] = []
    depth = 0
    quote: str | None = None
    for char in query:
        if quote is not None:
            quote = None if char == quote else quote
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                continue
            depth -= 1
        out.append(char)
    return "".join(out)


def _unqualified(name: str, datamart: str, change_num: int) -> str:
    parts = [p.strip('`"') for p in name.split(".")]
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != datamart):
        raise SchemaDefinitionError(
            f"change {change_num}: {name} is not in datamart {datamart}",
            statement=1,
            line=1,
            column=1,
        )
    return parts[-1]


def parse_change(record: ChangelogRecord, datamart: str) -> SchemaChange:
    """One changelog record; `SchemaDefinitionError` for a CREATE TABLE that cannot be read."""
    query, number = record.change_query, record.change_num
    if _CREATE_TABLE.match(query):
        schema = parse_schema(without_stray_parentheses(query).rstrip().rstrip(";"), datamart)
        if len(schema.tables) != 1:
            raise SchemaDefinitionError(
                f"a change holds {len(schema.tables)} CREATE TABLE statements, not one",
                statement=2,
                line=1,
                column=1,
            )
        (table,) = schema.tables
        return SchemaChange(number, ChangeKind.CREATE_TABLE, table.name, query, table=table)
    for kind, pattern in _PATTERNS:
        found = pattern.match(query)
        if found is None:
            continue
        if kind is ChangeKind.DATABASE:
            return SchemaChange(number, kind, "", query)
        groups = found.groups()
        name = _unqualified(groups[-1], datamart, number)
        materialized = len(groups) == 2 and bool(groups[0])
        return SchemaChange(number, kind, name, query, materialized=materialized)
    return SchemaChange(number, ChangeKind.UNSUPPORTED, "", query)


@dataclass(frozen=True)
class View:
    name: str
    query: str
    materialized: bool
    change_num: int


@dataclass(frozen=True)
class Dropped:
    """A table a `DROP TABLE` removed: its replica tables are kept (renamed)."""

    table: Table
    change_num: int


@dataclass(frozen=True)
class SchemaHistory:
    """The schema after every change up to `last_change` (-1: no change yet)."""

    datamart: str
    tables: tuple[Table, ...] = ()
    views: tuple[View, ...] = ()
    dropped: tuple[Dropped, ...] = ()
    unsupported: tuple[SchemaChange, ...] = ()
    last_change: int = -1
    changes: tuple[SchemaChange, ...] = field(default=(), repr=False)

    def table(self, name: str) -> Table | None:
        return next((t for t in self.tables if t.name == name), None)

    def logical_schema(self) -> LogicalSchema | None:
        """The tables as a logical schema (None while there is none)."""
        return LogicalSchema(datamart=self.datamart, tables=self.tables) if self.tables else None

    def replay(self, changes: Iterable[SchemaChange]) -> SchemaHistory:
        """This history with the changes later than `last_change`, in `changeNum` order
        (earlier or repeated change numbers are already part of it). Linear in the changes:
        the state is built once, not copied per change (100,000 changes took minutes)."""
        tables = {t.name: t for t in self.tables}
        views = {v.name: v for v in self.views}
        dropped, unsupported = list(self.dropped), list(self.unsupported)
        applied: list[SchemaChange] = []
        last = self.last_change
        for change in sorted(changes, key=lambda c: c.change_num):
            if change.change_num <= last:
                continue
            last = change.change_num
            applied.append(change)
            kind, name = change.kind, change.name
            if kind is ChangeKind.CREATE_TABLE and change.table is not None:
                tables.pop(name, None)  # a table created again goes last, as it was declared
                tables[name] = change.table
            elif kind is ChangeKind.DROP_TABLE:
                gone = tables.pop(name, None)
                if gone is not None:
                    dropped.append(Dropped(gone, change.change_num))
            elif kind is ChangeKind.CREATE_VIEW:
                views.pop(name, None)
                views[name] = View(name, change.query, change.materialized, change.change_num)
            elif kind is ChangeKind.DROP_VIEW:
                views.pop(name, None)
            elif kind is ChangeKind.UNSUPPORTED:
                unsupported.append(change)
        if not applied:
            return self
        return replace(
            self,
            tables=tuple(tables.values()),
            views=tuple(views.values()),
            dropped=tuple(dropped),
            unsupported=tuple(unsupported),
            last_change=last,
            changes=(*self.changes, *applied),
        )
