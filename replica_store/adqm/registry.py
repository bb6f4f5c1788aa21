"""The ADQM store's registry of applied deltas and its catalog of datamarts.

ClickHouse has no multi-statement transaction: a delta is part of the replica once its
registry row is written, and only then (docs/contracts/REPLICA.md). A single-row INSERT is atomic,
so the registry row is the commit point. `publishing` records a delta before its first table
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


def as_utc(value: datetime) -> datetime:
    """A timestamp ClickHouse returned (naive: UTC), as an aware UTC one."""
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
    return [_entry(row) for row in client.query(query).result_rows]


def _entry(row: Any) -> RegistryEntry:
    return RegistryEntry(
        datamart=row[0],
        delta_num=row[1],
        delta_date=as_utc(row[2]),
        request_id=row[3],
        tables=tuple(TableCounts(*t) for t in json.loads(row[4])),
        applied_at=as_utc(row[5]),
    )


def registry_entry(
    client: Any, names: Names, datamart: str, delta_num: int | None
) -> RegistryEntry | None:
    """The entry of `delta_num`, or with None the last entry."""
    entries = read_registry(client, names, datamart, delta_num=delta_num, last=delta_num is None)
    return entries[0] if entries else None


def sequence_entries(
    client: Any, names: Names, datamart: str, delta_num: int
) -> tuple[RegistryEntry | None, RegistryEntry | None]:
    """(the entry of `delta_num`, the last entry), read in one query: what the sequence
    check of a delta needs."""
    table = names.meta_table("delta_registry")
    rows = client.query(
        f"SELECT {_REGISTRY_COLUMNS} FROM {table} WHERE datamart = {literal(datamart)} AND "
        f"(delta_num = {int(delta_num)} OR delta_num = (SELECT maxOrNull(delta_num) "
        f"FROM {table} WHERE datamart = {literal(datamart)})) ORDER BY delta_num"
    ).result_rows
    entries = [_entry(row) for row in rows]
    stored = next((e for e in entries if e.delta_num == delta_num), None)
    return stored, entries[-1] if entries else None


def unregistered_after(client: Any, names: Names, datamart: str) -> tuple[bool, int | None]:
    """(whether a delta's publish started after the last registered delta, that delta)."""
    where = f"WHERE datamart = {literal(datamart)}"
    row = client.query(
        f"SELECT (SELECT maxOrNull(delta_num) FROM {names.meta_table('delta_registry')} "
        f"{where}), (SELECT maxOrNull(delta_num) FROM {names.meta_table('publishing')} {where})"
    ).result_rows[0]
    last, started = row[0], row[1]
    last_num = None if last is None else int(last)
    if started is None:
        return False, last_num
    return last_num is None or int(started) > last_num, last_num


def _timestamp(value: datetime) -> str:
    """A DateTime64(6, 'UTC') literal."""
    return f"toDateTime64({literal(as_utc(value).strftime('%Y-%m-%d %H:%M:%S.%f'))}, 6, 'UTC')"


def register(client: Any, names: Names, entry: RegistryEntry) -> None:
    """The commit point: the delta's registry row (one INSERT of one row: atomic)."""
    values = ", ".join(
        [
            literal(entry.datamart),
            str(int(entry.delta_num)),
            _timestamp(entry.delta_date),
            literal(entry.request_id),
            literal(encode_counts(list(entry.tables))),
            _timestamp(entry.applied_at),
        ]
    )
    client.command(
        f"INSERT INTO {names.meta_table('delta_registry')} ({_REGISTRY_COLUMNS}) VALUES ({values})"
    )


def mark_publishing(client: Any, names: Names, datamart: str, delta_num: int) -> None:
    client.command(
        f"INSERT INTO {names.meta_table('publishing')} (datamart, delta_num, started_at) "
        f"VALUES ({literal(datamart)}, {int(delta_num)}, now64(6))"
    )


def catalog_entry(client: Any, names: Names, datamart: str) -> tuple[int, str] | None:
    """(id, schema DDL) of a datamart whose store exists."""
    rows = client.query(
        f"SELECT id, schema_ddl FROM {names.meta_table('datamart')} "
        f"WHERE datamart = {literal(datamart)} ORDER BY recorded_at DESC LIMIT 1"
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


def record_schema(client: Any, names: Names, datamart_id: int, datamart: str, ddl: str) -> None:
    """The datamart's schema now (a restore's changelog changed it): the latest row wins."""
    client.command(
        f"INSERT INTO {names.meta_table('datamart')} (id, datamart, schema_ddl) "
        f"VALUES ({int(datamart_id)}, {literal(datamart)}, {literal(ddl)})"
    )


def catalog(client: Any, names: Names) -> list[str]:
    rows = client.query(
        f"SELECT datamart FROM {names.meta_table('datamart')} GROUP BY datamart ORDER BY min(id)"
    )
    return [str(r[0]) for r in rows.result_rows]
