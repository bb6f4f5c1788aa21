"""SQL text for the replica store, composed with `psycopg.sql` (`SQL`, `Identifier`) from
the logical schema's names, each checked (`protocol.schema.check_name`: no `$`, no control
character, at most 63 bytes) and always an `Identifier`, and column types from the closed
set of Prostore types. No value is ever part of the text: values go as parameters.

Plain SQL that PostgreSQL and Greenplum-family databases share (docs/contracts/REPLICA.md,
"Statements"); on an ADB target every table is created `DISTRIBUTED BY` (`dialect`). The
apply's statements are `apply_statements`'.
"""

from __future__ import annotations

import hashlib
import zlib

from psycopg import sql

from protocol.schema import LogicalSchema, Table
from protocol.types import ColumnType, TypeKind
from replica_store.dialect import distributed_by

#: The replica's own tables live here: catalog, registry, staging.
META_SCHEMA = "podd_replica"
SYSTEM_COLUMNS_SQL = ("sys_from bigint", "sys_to bigint", "sys_op integer")


def datamart_lock_key(datamart: str) -> int:
    """The advisory-lock key under which the datamart's replica tables, staging tables and
    registry change: loads hold it for their whole length, schema changes for theirs."""
    digest = hashlib.sha256(f"podd-replica:{datamart}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def ident(*parts: str) -> sql.Composable:
    """`"a"."b"`: each part an identifier (NUL refused: no identifier holds one)."""
    if any("\x00" in part for part in parts):
        raise ValueError("identifier contains NUL")
    return sql.Identifier(*parts)


def render(statement: sql.Composable) -> str:
    """A statement composed with `psycopg.sql`, as text (no connection needed: it holds
    identifiers and SQL only, never a value)."""
    return statement.as_string(None)


def q(name: str) -> str:
    """`name` as a quoted identifier, rendered by psycopg (no connection needed)."""
    return render(ident(name))


def physical_ident(datamart: str, table: str, kind: str) -> sql.Composable:
    return ident(datamart, f"{table}_{kind}")


def physical(datamart: str, table: str, kind: str) -> str:
    """`"dm"."t_actual"` or `"dm"."t_history"`."""
    return render(physical_ident(datamart, table, kind))


def staging_ident(datamart_id: int, table_position: int) -> sql.Composable:
    return ident(META_SCHEMA, f"stg_{datamart_id}_{table_position}")


def staging_name(datamart_id: int, table_position: int) -> str:
    """Staging tables are named by catalog ids, so any datamart and table name fits."""
    return render(staging_ident(datamart_id, table_position))


def _type(ctype: ColumnType) -> sql.Composable:
    """The column's PostgreSQL type: text from the closed set of Prostore types (and their
    integer lengths), never from a message."""
    return sql.SQL(ctype.to_postgres())


def _list(items: list[sql.Composable], separator: str = ", ") -> sql.Composable:
    return sql.SQL(separator).join(items)


def format_type(ctype: ColumnType) -> str:
    """The type as PostgreSQL's `format_type()` prints it, for comparing live tables."""
    pg = ctype.to_postgres()
    if pg.startswith("varchar"):
        return pg.replace("varchar", "character varying")
    if ctype.kind in (TypeKind.TIME, TypeKind.TIMESTAMP):
        return f"{pg} without time zone"
    return pg


#: The replica's own tables: (name, columns and constraints, distribution key on ADB).
_META_TABLES = (
    (
        "datamart",
        """    id serial{id_unique},
    datamart text PRIMARY KEY,
    schema_ddl text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()""",
        ("datamart",),
    ),
    (
        "catalog",
        """    datamart text NOT NULL,
    table_name text NOT NULL,
    table_position integer NOT NULL,
    column_position integer NOT NULL,
    column_name text NOT NULL,
    prostore_type text NOT NULL,
    not_null boolean NOT NULL,
    key_position integer,
    PRIMARY KEY (datamart, table_name, column_position)""",
        ("datamart",),
    ),
    (
        "delta_registry",
        """    datamart text NOT NULL,
    delta_num bigint NOT NULL,
    delta_date timestamp(6) NOT NULL,
    request_id text NOT NULL,
    table_counts text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (datamart, delta_num)""",
        ("datamart",),
    ),
    (
        "retired_table",
        """    datamart text NOT NULL,
    table_name text NOT NULL,
    kind text NOT NULL,
    renamed_to text NOT NULL,
    before_delta bigint NOT NULL,
    retired_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (datamart, renamed_to)""",
        ("datamart",),
    ),
    (
        "staged_stream",
        """    datamart text NOT NULL,
    table_name text NOT NULL,
    request_id text NOT NULL,
    stream_number integer NOT NULL,
    chunk_count integer NOT NULL,
    staged bigint NOT NULL,
    received bigint NOT NULL,
    PRIMARY KEY (datamart, table_name)""",
        ("datamart",),
    ),
    (
        "view",
        """    datamart text NOT NULL,
    view_name text NOT NULL,
    materialized boolean NOT NULL,
    query text NOT NULL,
    change_num bigint NOT NULL,
    PRIMARY KEY (datamart, view_name)""",
        ("datamart",),
    ),
)


def meta_ddl(distributed: bool) -> str:
    """The replica's own schema and tables (idempotent). `distributed` (a Greenplum server): a
    unique constraint must hold the distribution key, so the datamart's id is unique by its
    sequence alone."""
    id_unique = " NOT NULL" if distributed else " UNIQUE"
    statements = [sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident(META_SCHEMA))]
    for name, body, key in _META_TABLES:
        statements.append(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (\n{}\n){}").format(
                ident(META_SCHEMA, name),
                sql.SQL(body.replace("{id_unique}", id_unique)),
                distributed_by(distributed, key),
            )
        )
    return render(sql.SQL(";\n").join(statements))


#: PostgreSQL's longest identifier (bytes); longer ones are cut, which could merge names.
MAX_IDENTIFIER_BYTES = 63


def _columns_sql(table: Table, *, not_null: bool = True) -> list[sql.Composable]:
    """`"name" type` per logical column, `NOT NULL` where the schema says so if `not_null`
    (staging and the `_as_of` function's result hold no constraint)."""
    return [
        sql.SQL("{} {}{}").format(
            ident(c.name), _type(c.type), sql.SQL(" NOT NULL" if not_null and c.not_null else "")
        )
        for c in table.columns
    ]


def distribution_key(table: Table) -> tuple[str, ...]:
    """The columns an ADB target distributes the table's rows by: the DDL's, else the key."""
    return table.distributed_by or table.primary_key


def create_table_sql(distributed: bool, datamart: str, table: Table, kind: str) -> str:
    pk = _list([ident(k) for k in (*table.primary_key, "sys_from")])
    system = [sql.SQL(column) for column in SYSTEM_COLUMNS_SQL]
    columns = [*_columns_sql(table), *system, sql.SQL("PRIMARY KEY ({})").format(pk)]
    return render(
        sql.SQL("CREATE TABLE IF NOT EXISTS {} (\n    {}\n){}").format(
            physical_ident(datamart, table.name, kind),
            _list(columns, ",\n    "),
            distributed_by(distributed, distribution_key(table)),
        )
    )


#: The slice a staged row belongs to: the COPY leaves it to this default, which reads the
#: slice its transaction set (`SET LOCAL podd.slice`), so a retried task can replace
#: exactly its own slice's rows.
SLICE_COLUMN = "podd_slice"


def _staging_columns(table: Table) -> sql.Composable:
    """A staging table's columns: the logical ones (nullable), `sys_op`, the slice."""
    columns = _columns_sql(table, not_null=False)
    slice_column = sql.SQL(
        "{} integer NOT NULL DEFAULT current_setting('podd.slice')::integer"
    ).format(ident(SLICE_COLUMN))
    return _list([*columns, sql.SQL("sys_op integer NOT NULL"), slice_column])


def create_staging_sql(distributed: bool, datamart_id: int, position: int, table: Table) -> str:
    """Unlogged: staging is rewritten for every load and never part of the replica's state."""
    return render(
        sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} ({}){}").format(
            staging_ident(datamart_id, position),
            _staging_columns(table),
            distributed_by(distributed, distribution_key(table)),
        )
    )


def temp_staging_sql(
    distributed: bool, datamart_id: int, position: int, table: Table
) -> tuple[str, str]:
    """A session's temporary staging table for the table: (its quoted name, its DDL). Rows
    vanish at every commit; nothing of it is logged. The name carries a checksum of the
    columns, so a changed schema gets a table of its own."""
    columns = render(_staging_columns(table))
    name = render(
        ident("pg_temp", f"podd_stg_{datamart_id}_{position}_{zlib.crc32(columns.encode()):08x}")
    )
    clause = render(distributed_by(distributed, distribution_key(table)))
    ddl = f"CREATE TEMP TABLE IF NOT EXISTS {name} ({columns}) ON COMMIT DELETE ROWS{clause}"
    return name, ddl


def as_of_function_ident(datamart: str, table: str) -> sql.Composable:
    return ident(datamart, f"{table}_as_of")


def as_of_function_sql(datamart: str, table: Table) -> str:
    """`"dm"."t_as_of"(n)`: the table as of delta n, REPLICA.md's query as a function. Its
    body is quoted `$podd$`; no name may hold a `$` (`check_name`), so none can end it."""
    cols = _list([ident(c.name) for c in table.columns])
    returns = _list(_columns_sql(table, not_null=False))
    return render(
        sql.SQL(
            "CREATE OR REPLACE FUNCTION {name}(delta_num bigint)\n"
            "RETURNS TABLE ({returns}) LANGUAGE sql STABLE AS $podd$\n"
            "  SELECT {cols} FROM {actual} WHERE sys_from <= $1\n"
            "  UNION ALL\n"
            "  SELECT {cols} FROM {history}\n"
            "  WHERE sys_from <= $1 AND sys_to >= $1\n"
            "$podd$"
        ).format(
            name=as_of_function_ident(datamart, table.name),
            returns=returns,
            cols=cols,
            actual=physical_ident(datamart, table.name, "actual"),
            history=physical_ident(datamart, table.name, "history"),
        )
    )


def store_ddl(distributed: bool, schema: LogicalSchema) -> list[str]:
    """Every statement that creates the datamart's tables and functions (idempotent)."""
    statements = [render(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident(schema.datamart)))]
    for table in schema:
        statements.append(create_table_sql(distributed, schema.datamart, table, "actual"))
        statements.append(create_table_sql(distributed, schema.datamart, table, "history"))
        statements.append(as_of_function_sql(schema.datamart, table))
    return statements


def copy_statement(staging: str, table: Table) -> str:
    """Binary COPY into a staging table (`staging`: a name `staging_name` rendered): the
    logical columns, then `sys_op`."""
    columns = _list([*(ident(c.name) for c in table.columns), sql.SQL("sys_op")])
    return render(
        sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(sql.SQL(staging), columns)
    )
