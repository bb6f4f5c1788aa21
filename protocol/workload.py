"""A deterministic, seeded workload: deltas of inserts, updates and deletes over a schema.

The same schema, spec and seed always give the same deltas, in order. Values cover every
Prostore type within what PostgreSQL stores (NaN and infinities are left to the edge-value
tests, since they make row comparison awkward for a workload's users).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from protocol.apply_model import DELETE, UPSERT, DeltaRow, Key
from protocol.schema import Column, LogicalSchema, Table
from protocol.types import TypeKind

_EPOCH = datetime(1970, 1, 1)
_WORDS = ("alpha", "бета", "gamma", "дельта", "😀", "näive", "", "x")


@dataclass(frozen=True)
class WorkloadSpec:
    rows_per_delta: int = 1000  # spread over the tables
    insert_ratio: float = 0.7
    update_ratio: float = 0.2
    delete_ratio: float = 0.1
    null_ratio: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        total = self.insert_ratio + self.update_ratio + self.delete_ratio
        if abs(total - 1.0) > 1e-9 or min(self.insert_ratio, self.update_ratio) < 0:
            raise ValueError("insert, update and delete ratios must be >= 0 and add up to 1")
        if self.rows_per_delta < 0 or not 0 <= self.null_ratio <= 1:
            raise ValueError("rows_per_delta must be >= 0 and null_ratio in [0, 1]")


@dataclass
class _TableState:
    next_key: int = 0
    live: list[Key] = field(default_factory=list)
    positions: dict[Key, int] = field(default_factory=dict)

    def add(self, key: Key) -> None:
        if key not in self.positions:
            self.positions[key] = len(self.live)
            self.live.append(key)

    def remove(self, key: Key) -> None:
        index = self.positions.pop(key)
        last = self.live.pop()
        if index < len(self.live):
            self.live[index] = last
            self.positions[last] = index


class Workload:
    """Generates deltas 0, 1, 2, ... for `schema`; call `next_delta` in order."""

    def __init__(self, schema: LogicalSchema, spec: WorkloadSpec | None = None) -> None:
        self.schema = schema
        self.spec = spec or WorkloadSpec()
        self.delta_num = 0
        self._state = {t.name: _TableState() for t in schema}

    def next_delta(self) -> dict[str, list[DeltaRow]]:
        """The rows of the next delta, per table (every table present, maybe empty)."""
        # A seeded, reproducible workload, not a secret: the stdlib generator is right here.
        rng = random.Random(f"{self.spec.seed}:{self.delta_num}")  # noqa: S311
        tables = list(self.schema)
        share, extra = divmod(self.spec.rows_per_delta, len(tables))
        delta = {
            t.name: self._table_rows(rng, t, share + (1 if i < extra else 0))
            for i, t in enumerate(tables)
        }
        self.delta_num += 1
        return delta

    def _table_rows(self, rng: random.Random, table: Table, count: int) -> list[DeltaRow]:
        state = self._state[table.name]
        rows: list[DeltaRow] = []
        for _ in range(count):
            draw = rng.random()
            if state.live and draw >= self.spec.insert_ratio + self.spec.update_ratio:
                key = state.live[rng.randrange(len(state.live))]
                rows.append(DeltaRow(self._row(rng, table, key, deleted=True), DELETE))
                state.remove(key)
                continue
            if state.live and draw >= self.spec.insert_ratio:
                key = state.live[rng.randrange(len(state.live))]
            else:
                key = self._new_key(table, state.next_key)
                state.next_key += 1
            rows.append(DeltaRow(self._row(rng, table, key, deleted=False), UPSERT))
            state.add(key)
        return rows

    def _new_key(self, table: Table, counter: int) -> Key:
        return tuple(_key_value(table.column(name), counter) for name in table.primary_key)

    def _row(self, rng: random.Random, table: Table, key: Key, *, deleted: bool) -> tuple[Any, ...]:
        keyed = dict(zip(table.primary_key, key, strict=True))
        values = []
        for column in table.columns:
            if column.name in keyed:
                values.append(keyed[column.name])
            elif column.nullable and (deleted or rng.random() < self.spec.null_ratio):
                values.append(None)
            else:
                values.append(random_value(rng, column))
        return tuple(values)


def _key_value(column: Column, counter: int) -> Any:
    """An injective mapping of a counter to a key value of the column's type."""
    kind = column.type.kind
    if kind in (TypeKind.INT, TypeKind.BIGINT, TypeKind.INT32):
        return counter
    if kind is TypeKind.BOOLEAN:
        return counter % 2 == 1
    if kind in (TypeKind.FLOAT, TypeKind.DOUBLE):
        return float(counter)
    if kind is TypeKind.DATE:
        return date(2000, 1, 1) + timedelta(days=counter)
    if kind is TypeKind.TIME:
        return (datetime.min + timedelta(microseconds=counter)).time()
    if kind is TypeKind.TIMESTAMP:
        return datetime(2000, 1, 1) + timedelta(microseconds=counter)
    if kind is TypeKind.UUID:
        return str(uuid.UUID(int=counter))
    text = f"k{counter}"
    limit = column.type.max_chars
    return text if limit is None or len(text) <= limit else text[-limit:]


def random_value(rng: random.Random, column: Column) -> Any:
    """A value of the column's type that PostgreSQL can store."""
    kind = column.type.kind
    if kind is TypeKind.BOOLEAN:
        return rng.random() < 0.5
    if kind is TypeKind.INT32:
        return rng.choice((rng.randint(-1000, 1000), -(2**31), 2**31 - 1))
    if kind in (TypeKind.INT, TypeKind.BIGINT):
        return rng.choice((rng.randint(-(10**9), 10**9), rng.randint(-(2**63), 2**63 - 1)))
    if kind is TypeKind.FLOAT:
        return float(int(rng.uniform(-1e6, 1e6))) / 4  # exact in float32
    if kind is TypeKind.DOUBLE:
        return rng.uniform(-1e12, 1e12)
    if kind is TypeKind.DATE:
        return date(1900, 1, 1) + timedelta(days=rng.randrange(0, 73_000))
    if kind is TypeKind.TIME:
        return (datetime.min + timedelta(microseconds=rng.randrange(86_400_000_000))).time()
    if kind is TypeKind.TIMESTAMP:
        return _EPOCH + timedelta(microseconds=rng.randrange(-(10**15), 4 * 10**15))
    if kind is TypeKind.UUID:
        return str(uuid.UUID(int=rng.getrandbits(128)))
    limit = column.type.max_chars or 40
    words = [rng.choice(_WORDS) for _ in range(rng.randrange(1, 6))]
    return " ".join(words)[:limit]
