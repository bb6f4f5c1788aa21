"""The ADQM store's registry of applied deltas and its catalog of datamarts.

ClickHouse has no multi-statement transaction: a delta is part of the replica once its
registry row is written, and only then (docs/REPLICA.md). A single-row INSERT is atomic, so
the registry row is the commit point. `publishing` records a delta before its first table
is published: a later start that finds one after the last registered delta undoes it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from protocol.apply_model import TableCounts
from replica_store.adqm.names import Names, literal
from replica_store.registry import RegistryEntry, encode_counts

_REGISTRY_COLUMNS = "datamart, delta_num, delta_date, request_id, table_counts, applied_at"


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def read_registry(
    client: Any, names: Names, datamart: str, *, delta_num: int | None = None, last: bool = False
) -> list[RegistryEntry]:
    query = (
        f"SELECT {_REGISTRY_COLUMNS} FROM {names.meta_table('delta_registry')} "
        f"WHERE datamart = {literal(datamart)}"
    )
    if delta_num is not None:
        query += f" AND delta_num = {int(delta_num)}"
    query += " ORDER BY delta_num DESC LIMIT 1" if last else " ORDER BY delta_num"
    return [
        RegistryEntry(
            datamart=row[0],
            delta_num=row[1],
            delta_date=_utc(row[2]),
            request_id=row[3],
            tables=tuple(TableCounts(*t) for t in json.loads(row[4])),
            applied_at=_utc(row[5]),
        )
        for row in client.query(query).result_rows
    ]


def registry_entry(
    client: Any, names: Names, datamart: str, delta_num: int | None
) -> RegistryEntry | None:
    """The entry of `delta_num`, or with None the last entry."""
    entries = read_registry(client, names, datamart, delta_num=delta_num, last=delta_num is None)
    return entries[0] if entries else None


def register(client: Any, names: Names, entry: RegistryEntry) -> None:
    """The commit point: the delta's registry row."""
    client.insert(
        names.meta_table("delta_registry"),
        [
            [
                entry.datamart,
                entry.delta_num,
                _utc(entry.delta_date),
                entry.request_id,
                encode_counts(list(entry.tables)),
                _utc(entry.applied_at),
            ]
        ],
        column_names=_REGISTRY_COLUMNS.split(", "),
    )


def mark_publishing(client: Any, names: Names, datamart: str, delta_num: int) -> None:
    client.insert(
        names.meta_table("publishing"),
        [[datamart, delta_num, datetime.now(UTC)]],
        column_names=["datamart", "delta_num", "started_at"],
    )


def last_publishing(client: Any, names: Names, datamart: str) -> int | None:
    """The last delta whose publish started (registered or not)."""
    rows = client.query(
        f"SELECT maxOrNull(delta_num) FROM {names.meta_table('publishing')} "
        f"WHERE datamart = {literal(datamart)}"
    ).result_rows
    return None if not rows or rows[0][0] is None else int(rows[0][0])


def catalog_entry(client: Any, names: Names, datamart: str) -> tuple[int, str] | None:
    """(id, schema DDL) of a datamart whose store exists."""
    rows = client.query(
        f"SELECT id, schema_ddl FROM {names.meta_table('datamart')} "
        f"WHERE datamart = {literal(datamart)} ORDER BY id LIMIT 1"
    ).result_rows
    return None if not rows else (int(rows[0][0]), str(rows[0][1]))


def add_to_catalog(client: Any, names: Names, datamart: str, schema_ddl: str) -> int:
    rows = client.query(f"SELECT max(id) FROM {names.meta_table('datamart')}").result_rows
    datamart_id = int(rows[0][0] or 0) + 1
    client.insert(
        names.meta_table("datamart"),
        [[datamart_id, datamart, schema_ddl]],
        column_names=["id", "datamart", "schema_ddl"],
    )
    return datamart_id


def catalog(client: Any, names: Names) -> list[str]:
    rows = client.query(f"SELECT datamart FROM {names.meta_table('datamart')} ORDER BY id")
    return [str(r[0]) for r in rows.result_rows]
