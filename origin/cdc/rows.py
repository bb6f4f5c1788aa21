"""A delta's rows from its changes: the last state per key, in the source's order."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from origin.cdc.records import Change, Position
from protocol.apply_model import DeltaRow
from protocol.schema import LogicalSchema


def delta_rows(
    schema: LogicalSchema, changes: Iterable[tuple[Position, Change]]
) -> dict[str, list[DeltaRow]]:
    """Per table, one row per key: the last change to it by (source order, position)."""
    last: dict[str, dict[tuple[Any, ...], DeltaRow]] = {t.name: {} for t in schema}
    keys = {t.name: t.key_positions for t in schema}
    for _, change in sorted(changes, key=lambda c: (c[1].order, c[0])):
        for row in change.rows:
            positions = keys[row.table]
            key = tuple(row.values[i] for i in positions)
            by_key = last[row.table]
            by_key.pop(key, None)  # re-inserted: the dict keeps the order of last changes
            by_key[key] = DeltaRow(row.values, row.sys_op)
    return {name: list(rows.values()) for name, rows in last.items()}


def rows_digest(rows: dict[str, list[DeltaRow]]) -> str:
    """A fingerprint of a delta's rows, to prove a rebuilt delta is the one recorded."""
    digest = hashlib.sha256()
    for name in sorted(rows):
        digest.update(name.encode() + b"\x00")
        for row in rows[name]:
            digest.update(repr((row.values, row.sys_op)).encode() + b"\x01")
    return digest.hexdigest()
