"""A replica's live tables checked against its logical schema before anything loads: a table
that disagrees (a column, its type or nullability, the primary key, a table the schema no
longer has) is refused, naming the table and the difference; nothing is altered."""

from __future__ import annotations

import psycopg

from protocol.schema import LogicalSchema, Table
from replica_store.errors import StoreMismatchError
from replica_store.store_sql import META_SCHEMA, format_type, q

_COLUMNS_QUERY = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_attribute a
WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""
_KEY_QUERY = """
SELECT a.attname
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = to_regclass(%s) AND i.indisprimary
ORDER BY array_position(i.indkey::int2[], a.attnum)
"""


def _expected_columns(table: Table) -> list[tuple[str, str, bool]]:
    logical = [(c.name, format_type(c.type), c.not_null) for c in table.columns]
    return [
        *logical,
        ("sys_from", "bigint", True),
        ("sys_to", "bigint", False),
        ("sys_op", "integer", False),
    ]


def check_live_tables(conn: psycopg.Connection, schema: LogicalSchema) -> None:
    """Refuse, naming the table and the difference, if live tables disagree with `schema`."""
    for table in schema:
        for kind in ("actual", "history"):
            regclass = f"{q(schema.datamart)}.{q(f'{table.name}_{kind}')}"
            live = [tuple(r) for r in conn.execute(_COLUMNS_QUERY, (regclass,)).fetchall()]
            if not live:
                continue  # not created yet
            name = f"{schema.datamart}.{table.name}_{kind}"
            difference = _difference(_expected_columns(table), live)
            if difference:
                raise StoreMismatchError(
                    f"table {name} disagrees with the logical schema: {difference}"
                )
            key = [r[0] for r in conn.execute(_KEY_QUERY, (regclass,)).fetchall()]
            expected_key = [*table.primary_key, "sys_from"]
            if key != expected_key:
                raise StoreMismatchError(
                    f"table {name} disagrees with the logical schema: its primary key is "
                    f"({', '.join(key)}), expected ({', '.join(expected_key)})"
                )
    known = conn.execute(
        f"SELECT DISTINCT table_name FROM {q(META_SCHEMA)}.catalog WHERE datamart = %s",
        (schema.datamart,),
    ).fetchall()
    for (table_name,) in known:
        if not schema.has_table(table_name):
            raise StoreMismatchError(
                f"table {schema.datamart}.{table_name} is in the replica but not in the "
                f"logical schema (drop it, or keep it in the schema)"
            )


def _difference(expected: list[tuple[str, str, bool]], live: list[tuple[object, ...]]) -> str:
    for position, (want, have) in enumerate(zip(expected, live, strict=False), start=1):
        if tuple(have) != want:
            null = {True: "NOT NULL", False: "nullable"}
            return (
                f"column {position} is {have[0]} {have[1]} {null[bool(have[2])]}, "
                f"expected {want[0]} {want[1]} {null[want[2]]}"
            )
    if len(live) != len(expected):
        extra = [str(c[0]) for c in live[len(expected) :]]
        missing = [c[0] for c in expected[len(live) :]]
        if extra:
            return f"it has columns the schema lacks: {', '.join(extra)}"
        return f"it lacks columns: {', '.join(missing)}"
    return ""
