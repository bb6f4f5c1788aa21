"""A datamart's schema changing under a restore (a backup's changelog): a dropped table
stops being applied and its versions are kept, renamed; views are recorded, not created
(their SQL is Prostore's dialect and holds no data). As `ReplicaStore` does on PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from replica_store.adqm.names import Names, literal, quote


def retire_table(
    client: Any, names: Names, datamart: str, table: str, before_delta: int
) -> list[str]:
    """`<t>_actual` renamed `<t>_dropped_before_<n>_actual`, its views dropped; idempotent
    (a table retired already, or never made, is left alone). The new names."""
    database = names.prefix + datamart
    old, new = f"{table}_actual", f"{table}_dropped_before_{before_delta}_actual"
    exists = client.query(
        f"SELECT count() FROM system.tables WHERE database = {literal(database)} "
        f"AND name = {literal(old)}"
    ).result_rows[0][0]
    if not exists:
        return []
    client.command(f"DROP VIEW IF EXISTS {names.as_of_view(datamart, table)}")
    client.command(f"DROP VIEW IF EXISTS {names.current_view(datamart, table)}")
    client.command(
        f"RENAME TABLE {names.database(datamart)}.{quote(old)} "
        f"TO {names.database(datamart)}.{quote(new)}"
    )
    client.command(
        f"INSERT INTO {names.meta_table('retired_table')} "
        f"VALUES ({literal(datamart)}, {literal(table)}, {literal(new)}, {int(before_delta)})"
    )
    return [f"{datamart}.{new}"]


def record_views(
    client: Any, names: Names, datamart: str, views: list[tuple[str, bool, str, int]]
) -> None:
    """The datamart's views now: (name, materialized, Prostore SQL, changeNum) each."""
    text = json.dumps([list(view) for view in views])
    client.command(
        f"INSERT INTO {names.meta_table('view')} (datamart, views) "
        f"VALUES ({literal(datamart)}, {literal(text)})"
    )


def recorded_views(client: Any, names: Names, datamart: str) -> list[tuple[str, bool, str, int]]:
    rows = client.query(
        f"SELECT views FROM {names.meta_table('view')} WHERE datamart = {literal(datamart)} "
        "ORDER BY recorded_at DESC LIMIT 1"
    ).result_rows
    if not rows:
        return []
    return [(str(v[0]), bool(v[1]), str(v[2]), int(v[3])) for v in json.loads(rows[0][0])]
