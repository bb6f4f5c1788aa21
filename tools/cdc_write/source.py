"""A seeded source database: tables in a source's own types, a full load, then transactions of
inserts, updates (some changing the key) and deletes. Every value is kept twice: as the
writers put it on the wire (`wire`), and as the replica must hold it (`replica_value`)."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

_EPOCH = datetime(1970, 1, 1)
_WORDS = ("alpha", "бета", "gamma", "дельта", "😀", "näive", "x", "O'Brien", 'say "hi"')


@dataclass(frozen=True)
class SourceColumn:
    name: str
    type: str  # the source's type name: Qlik (INT4, STRING, ...) or DataWorks (LONG, ...)
    length: int | None = None
    precision: int | None = None
    scale: int | None = None


@dataclass(frozen=True)
class SourceTable:
    name: str
    columns: tuple[SourceColumn, ...]
    key: tuple[str, ...]  # empty: no primary key
    dialect: str = "qlik"  # whose type names: "qlik" or "dataworks"

    def key_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row[k] for k in self.key)


@dataclass(frozen=True)
class SourceChange:
    table: str
    op: str  # INSERT, UPDATE, DELETE, REFRESH
    before: dict[str, Any] | None
    after: dict[str, Any] | None


@dataclass(frozen=True)
class SourceTransaction:
    number: int  # commit order, from 1
    commit_ms: int  # commit time, ms since the epoch
    changes: tuple[SourceChange, ...]


def value(
    rng: random.Random, column: SourceColumn, counter: int | None = None, dialect: str = "qlik"
) -> Any:
    """A value of the source type (a key value from `counter` when given)."""
    kind = column.type.upper()
    if kind in ("INT1", "UINT1"):
        low, high = (-128, 127) if kind == "INT1" else (0, 255)
        return low + (counter % (high - low)) if counter is not None else rng.randint(low, high)
    if kind in ("INT2", "UINT2", "INT4", "UINT4", "INT8", "UINT8", "LONG"):
        if counter is not None:
            return counter
        limits = {"INT2": 32_767, "UINT2": 65_535, "INT4": 2**31 - 1, "UINT4": 2**32 - 1}
        top = limits.get(kind, 2**63 - 1)
        return rng.randint(0 if kind.startswith("U") else -top, top)
    if kind in ("REAL4",):
        return float(rng.randint(-4_000_000, 4_000_000)) / 4  # exact in float32
    if kind in ("REAL8", "DOUBLE"):
        return rng.uniform(-1e12, 1e12)
    if kind == "NUMERIC":
        digits = column.precision or 10
        whole = rng.randint(0, 10 ** min(digits - (column.scale or 0), 18) - 1)
        if counter is not None:
            whole = counter
        if not column.scale:
            return whole
        return Decimal(whole) + Decimal(rng.randint(0, 10**column.scale - 1)).scaleb(-column.scale)
    if kind == "BOOLEAN":
        return rng.random() < 0.5
    if kind == "DATE" and dialect == "qlik":
        return date(1990, 1, 1) + timedelta(days=rng.randrange(20_000))
    if kind == "TIME":
        return (datetime.min + timedelta(microseconds=rng.randrange(86_400_000_000))).time()
    if kind in ("DATETIME", "DATE"):  # a DataWorks DATE is an instant, in ms
        millis = rng.randrange(0, 2_000_000_000_000)
        return _EPOCH + timedelta(milliseconds=millis)
    if kind in ("BYTES", "BLOB"):
        return rng.randbytes(rng.randrange(0, 12))
    limit = column.length or 60
    if counter is not None:
        return f"k{counter}"[:limit]
    text = " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(1, 5)))
    if rng.random() < 0.2:
        text += "".join(rng.choices(string.ascii_letters, k=rng.randrange(0, 20)))
    return text[:limit]


@dataclass
class SourceDatabase:
    """Tables and their rows; `full_load` and `transaction` change them and say how."""

    tables: tuple[SourceTable, ...]
    seed: int = 0
    null_ratio: float = 0.1
    key_change_ratio: float = 0.05
    rows: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = field(default_factory=dict)
    _next_key: dict[str, int] = field(default_factory=dict)
    #: The first commit time, ms since the epoch (sequences and event times grow from it).
    start_ms: int = 1_700_000_000_000
    _transactions: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)  # noqa: S311 - a seeded workload, not a secret
        self._clock_ms = self.start_ms
        for table in self.tables:
            self.rows.setdefault(table.name, {})
            self._next_key.setdefault(table.name, 0)

    def table(self, name: str) -> SourceTable:
        return next(t for t in self.tables if t.name == name)

    def _row(self, table: SourceTable, key_counter: int) -> dict[str, Any]:
        row = {}
        for column in table.columns:
            if column.name in table.key or (not table.key and column is table.columns[0]):
                row[column.name] = value(self.rng, column, key_counter, table.dialect)
            elif self.rng.random() < self.null_ratio:
                row[column.name] = None
            else:
                row[column.name] = value(self.rng, column, None, table.dialect)
        return row

    def _identity(self, table: SourceTable, row: dict[str, Any]) -> tuple[Any, ...]:
        return table.key_of(row) if table.key else (row[table.columns[0].name],)

    def _insert(self, table: SourceTable, op: str = "INSERT") -> SourceChange:
        counter = self._next_key[table.name]
        self._next_key[table.name] += 1
        row = self._row(table, counter)
        self.rows[table.name][self._identity(table, row)] = row
        return SourceChange(table.name, op, None, row)

    def full_load(self, rows_per_table: int) -> list[SourceChange]:
        return [self._insert(t, "REFRESH") for t in self.tables for _ in range(rows_per_table)]

    def transaction(self, size: int) -> SourceTransaction:
        changes = []
        for _ in range(size):
            table = self.rng.choice(self.tables)
            live = self.rows[table.name]
            draw = self.rng.random()
            if not live or draw < 0.5:
                changes.append(self._insert(table))
                continue
            key = self.rng.choice(list(live)) if len(live) < 64 else self._pick(live)
            before = live[key]
            if draw < 0.85:
                after = dict(self._row(table, 0), **{k: before[k] for k in table.key})
                if not table.key:
                    after[table.columns[0].name] = before[table.columns[0].name]
                if table.key and self.rng.random() < self.key_change_ratio:
                    counter = self._next_key[table.name]
                    self._next_key[table.name] += 1
                    fresh = self._row(table, counter)
                    after.update({k: fresh[k] for k in table.key})
                del live[key]
                live[self._identity(table, after)] = after
                changes.append(SourceChange(table.name, "UPDATE", before, after))
            else:
                del live[key]
                changes.append(SourceChange(table.name, "DELETE", before, None))
        self._transactions += 1
        self._clock_ms += self.rng.randrange(1, 50)
        return SourceTransaction(self._transactions, self._clock_ms, tuple(changes))

    def _pick(self, live: dict[tuple[Any, ...], dict[str, Any]]) -> tuple[Any, ...]:
        # dicts keep insertion order: sample a few leading keys cheaply, recent ones too
        keys = iter(live)
        skip = self.rng.randrange(min(len(live), 64))
        for _ in range(skip):
            next(keys)
        return next(keys)
