"""SQL text for the replica store, built only from the logical schema's names, each checked
(`protocol.schema.check_name`: no `$`, no control character, at most 63 bytes) and rendered
as an identifier by `psycopg.sql.Identifier`.

Plain SQL that PostgreSQL and Greenplum-family databases share: no MERGE, no ON CONFLICT.
The apply (`apply_sql`) is one writable CTE per table (docs/REPLICA.md says what that asks).
"""

from __future__ import annotations

import hashlib

from psycopg import sql

from protocol.schema import LogicalSchema, Table
from protocol.types import ColumnType, TypeKind

#: The replica's own tables live here: catalog, registry, staging.
META_SCHEMA = "podd_replica"
SYSTEM_COLUMNS_SQL = ("sys_from bigint", "sys_to bigint", "sys_op integer")


def datamart_lock_key(datamart: str) -> int:
    """The advisory-lock key under which the datamart's replica tables, staging tables and
    registry change: loads hold it for their whole length, schema changes for theirs."""
    digest = hashlib.sha256(f"podd-replica:{datamart}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def q(name: str) -> str:
    """`name` as a quoted identifier, rendered by psycopg (no connection needed)."""
    if "\x00" in name:
        raise ValueError("identifier contains NUL")
    return sql.Identifier(name).as_string(None)


def physical(datamart: str, table: str, kind: str) -> str:
    """`"dm"."t_actual"` or `"dm"."t_history"`."""
    return f"{q(datamart)}.{q(f'{table}_{kind}')}"


def staging_name(datamart_id: int, table_position: int) -> str:
    """Staging tables are named by catalog ids, so any datamart and table name fits."""
    return f"{q(META_SCHEMA)}.{q(f'stg_{datamart_id}_{table_position}')}"


def format_type(ctype: ColumnType) -> str:
    """The type as PostgreSQL's `format_type()` prints it, for comparing live tables."""
    pg = ctype.to_postgres()
    if pg.startswith("varchar"):
        return pg.replace("varchar", "character varying")
    if ctype.kind in (TypeKind.TIME, TypeKind.TIMESTAMP):
        return f"{pg} without time zone"
    return pg


META_DDL = f"""
CREATE SCHEMA IF NOT EXISTS {q(META_SCHEMA)};
CREATE TABLE IF NOT EXISTS {q(META_SCHEMA)}.datamart (
    id serial UNIQUE,
    datamart text PRIMARY KEY,
    schema_ddl text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {q(META_SCHEMA)}.catalog (
    datamart text NOT NULL,
    table_name text NOT NULL,
    table_position integer NOT NULL,
    column_position integer NOT NULL,
    column_name text NOT NULL,
    prostore_type text NOT NULL,
    not_null boolean NOT NULL,
    key_position integer,
    PRIMARY KEY (datamart, table_name, column_position)
);
CREATE TABLE IF NOT EXISTS {q(META_SCHEMA)}.delta_registry (
    datamart text NOT NULL,
    delta_num bigint NOT NULL,
    delta_date timestamp(6) NOT NULL,
    request_id text NOT NULL,
    table_counts text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (datamart, delta_num)
);
CREATE TABLE IF NOT EXISTS {q(META_SCHEMA)}.retired_table (
    datamart text NOT NULL,
    table_name text NOT NULL,
    kind text NOT NULL,
    renamed_to text NOT NULL,
    before_delta bigint NOT NULL,
    retired_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (datamart, renamed_to)
);
CREATE TABLE IF NOT EXISTS {q(META_SCHEMA)}.view (
    datamart text NOT NULL,
    view_name text NOT NULL,
    materialized boolean NOT NULL,
    query text NOT NULL,
    change_num bigint NOT NULL,
    PRIMARY KEY (datamart, view_name)
);
"""

#: PostgreSQL's longest identifier (bytes); longer ones are cut, which could merge names.
MAX_IDENTIFIER_BYTES = 63


def _columns_sql(table: Table) -> list[str]:
    return [
        f"{q(c.name)} {c.type.to_postgres()}{' NOT NULL' if c.not_null else ''}"
        for c in table.columns
    ]


def create_table_sql(datamart: str, table: Table, kind: str) -> str:
    pk = ", ".join(q(k) for k in (*table.primary_key, "sys_from"))
    columns = [*_columns_sql(table), *SYSTEM_COLUMNS_SQL, f"PRIMARY KEY ({pk})"]
    body = ",\n    ".join(columns)
    return f"CREATE TABLE IF NOT EXISTS {physical(datamart, table.name, kind)} (\n    {body}\n)"


#: The slice a staged row belongs to: the COPY leaves it to this default, which reads the
#: slice its transaction set (`SET LOCAL podd.slice`), so a retried task can replace
#: exactly its own slice's rows.
SLICE_COLUMN = "podd_slice"


def create_staging_sql(datamart_id: int, position: int, table: Table) -> str:
    """Unlogged: staging is rewritten for every load and never part of the replica's state."""
    columns = [f"{q(c.name)} {c.type.to_postgres()}" for c in table.columns]
    slice_column = f"{SLICE_COLUMN} integer NOT NULL DEFAULT current_setting('podd.slice')::integer"
    body = ", ".join([*columns, "sys_op integer NOT NULL", slice_column])
    return f"CREATE UNLOGGED TABLE IF NOT EXISTS {staging_name(datamart_id, position)} ({body})"


def as_of_function_sql(datamart: str, table: Table) -> str:
    """`"dm"."t_as_of"(n)`: the table as of delta n, REPLICA.md's query as a function."""
    cols = ", ".join(q(c.name) for c in table.columns)
    returns = ", ".join(f"{q(c.name)} {c.type.to_postgres()}" for c in table.columns)
    name = f"{q(datamart)}.{q(f'{table.name}_as_of')}"
    return (
        f"CREATE OR REPLACE FUNCTION {name}(delta_num bigint)\n"
        f"RETURNS TABLE ({returns}) LANGUAGE sql STABLE AS $podd$\n"
        f"  SELECT {cols} FROM {physical(datamart, table.name, 'actual')} WHERE sys_from <= $1\n"
        f"  UNION ALL\n"
        f"  SELECT {cols} FROM {physical(datamart, table.name, 'history')}\n"
        f"  WHERE sys_from <= $1 AND sys_to >= $1\n"
        f"$podd$"
    )


def store_ddl(schema: LogicalSchema) -> list[str]:
    """Every statement that creates the datamart's tables and functions (idempotent)."""
    statements = [f"CREATE SCHEMA IF NOT EXISTS {q(schema.datamart)}"]
    for table in schema:
        statements.append(create_table_sql(schema.datamart, table, "actual"))
        statements.append(create_table_sql(schema.datamart, table, "history"))
        statements.append(as_of_function_sql(schema.datamart, table))
    return statements


def copy_statement(staging: str, table: Table) -> str:
    """Binary COPY into a staging table: the logical columns, then `sys_op`."""
    columns = ", ".join([*(q(c.name) for c in table.columns), "sys_op"])
    return f"COPY {staging} ({columns}) FROM STDIN (FORMAT BINARY)"
