"""The ADQM store's tables (docs/contracts/REPLICA.md, "The ADQM store"), as DDL statements.

Per datamart, a database (the prefix, then the datamart's name) with, for each table `t`:

* `t_actual`: `CollapsingMergeTree(sign)` holding every version, open and closed, sorted by
  `(pk…, sys_from, sys_to)`, so that a version's cancel row and its closed row never share a
  sorting key, whatever merges run between or after their inserts;
* `t_as_of`: a parameterized view of the rows as of delta `n` (`SELECT * FROM
  dm.sales_as_of(n = 3)`), and `t_current`: as of the last registered delta.

The replica's own tables live in `podd_replica` (after the prefix): the catalog
(`datamart`), the registry of applied deltas (`delta_registry`, the same columns as
PostgreSQL's), the deltas whose publish started (`publishing`), and per table two staging
tables: the delta's incoming rows, and the rows published into `t_actual` by one
`ATTACH PARTITION … FROM` (then emptied).

With a cluster name, DDL runs `ON CLUSTER`, `t_actual_shard` holds each shard's rows and
`t_actual` is a `Distributed` table over them, sharded by the primary key's hash.
"""

from __future__ import annotations

from protocol.schema import LogicalSchema, Table
from replica_store.adqm.lease import lease_ddl
from replica_store.adqm.names import Names, literal, quote
from replica_store.adqm.types import column_types, read_expression

#: `sys_to` of an open version, and `sys_close_date` of an open version (DateTime's last).
OPEN_SYS_TO = 2**63 - 1
OPEN_CLOSE_DATE = 4_294_967_295
SYSTEM_COLUMNS = (
    ("sys_from", "Int64"),
    ("sys_to", "Int64"),
    ("sys_op", "Int8"),
    ("sys_close_date", "DateTime"),
    ("sign", "Int8"),
)


def on_cluster(cluster: str | None) -> str:
    return f" ON CLUSTER {quote(cluster)}" if cluster else ""


def meta_ddl(names: Names, cluster: str | None = None) -> list[str]:
    """The replica's own database and tables."""
    where = on_cluster(cluster)
    return [
        f"CREATE DATABASE IF NOT EXISTS {names.meta}{where}",
        f"CREATE TABLE IF NOT EXISTS {names.meta_table('datamart')}{where} "
        "(id UInt32, datamart String, schema_ddl String, "
        "recorded_at DateTime64(6, 'UTC') DEFAULT now64(6)) "
        "ENGINE = MergeTree ORDER BY (id, recorded_at)",
        f"CREATE TABLE IF NOT EXISTS {names.meta_table('retired_table')}{where} "
        "(datamart String, table_name String, renamed_to String, before_delta Int64) "
        "ENGINE = MergeTree ORDER BY (datamart, table_name)",
        f"CREATE TABLE IF NOT EXISTS {names.meta_table('view')}{where} "
        "(datamart String, views String, recorded_at DateTime64(6, 'UTC') DEFAULT now64(6)) "
        "ENGINE = MergeTree ORDER BY (datamart, recorded_at)",
        f"CREATE TABLE IF NOT EXISTS {names.meta_table('delta_registry')}{where} "
        "(datamart String, delta_num Int64, delta_date DateTime64(6, 'UTC'), "
        "request_id String, table_counts String, applied_at DateTime64(6, 'UTC')) "
        "ENGINE = MergeTree ORDER BY (datamart, delta_num)",
        f"CREATE TABLE IF NOT EXISTS {names.meta_table('publishing')}{where} "
        "(datamart String, delta_num Int64, started_at DateTime64(6, 'UTC')) "
        "ENGINE = MergeTree ORDER BY (datamart, delta_num)",
        lease_ddl(names, where),
    ]


def version_columns(table: Table) -> str:
    """The column list of `t_actual`: the logical columns, then the system columns."""
    columns = [*column_types(table), *SYSTEM_COLUMNS]
    return ", ".join(f"{quote(name)} {kind}" for name, kind in columns)


def sorting_key(table: Table) -> str:
    return ", ".join([*(quote(k) for k in table.primary_key), "sys_from", "sys_to"])


def collapsing(table: Table) -> str:
    return f"ENGINE = CollapsingMergeTree(sign) ORDER BY ({sorting_key(table)})"


def table_ddl(names: Names, schema: LogicalSchema, cluster: str | None = None) -> list[str]:
    """The datamart's database and its tables' `t_actual` (with shards on a cluster)."""
    datamart, where = schema.datamart, on_cluster(cluster)
    statements = [f"CREATE DATABASE IF NOT EXISTS {names.database(datamart)}{where}"]
    for table in schema:
        actual = names.actual(datamart, table.name)
        if cluster is None:
            statements.append(
                f"CREATE TABLE IF NOT EXISTS {actual} ({version_columns(table)}) "
                + collapsing(table)
            )
            continue
        shard = names.actual_shard(datamart, table.name)
        keys = ", ".join(quote(k) for k in table.primary_key)
        statements += [
            f"CREATE TABLE IF NOT EXISTS {shard}{where} ({version_columns(table)}) "
            + collapsing(table),
            f"CREATE TABLE IF NOT EXISTS {actual}{where} AS {shard} ENGINE = Distributed("
            f"{literal(cluster)}, {literal(names.prefix + datamart)}, "
            f"{literal(table.name + '_actual_shard')}, cityHash64({keys}))",
        ]
    return statements


def logical_select(table: Table) -> str:
    return ", ".join(read_expression(c.type, quote(c.name)) for c in table.columns)


def view_ddl(names: Names, schema: LogicalSchema, cluster: str | None = None) -> list[str]:
    """`t_as_of(n)` and `t_current` for every table (made anew: they hold no data)."""
    datamart, where = schema.datamart, on_cluster(cluster)
    last = (
        f"(SELECT maxOrNull(delta_num) FROM {names.meta_table('delta_registry')} "
        f"WHERE datamart = {literal(datamart)})"
    )
    statements = []
    for table in schema:
        columns = ", ".join(quote(c.name) for c in table.columns)
        source = f"{names.actual(datamart, table.name)} FINAL"
        statements += [
            f"CREATE OR REPLACE VIEW {names.as_of_view(datamart, table.name)}{where} AS "
            f"SELECT {columns} FROM {source} "
            "WHERE sys_from <= {n:Int64} AND sys_to >= {n:Int64} AND sign = 1",
            f"CREATE OR REPLACE VIEW {names.current_view(datamart, table.name)}{where} AS "
            f"SELECT {columns} FROM {source} "
            f"WHERE sys_from <= {last} AND sys_to >= {last} AND sign = 1",
        ]
    return statements


def staging_ddl(names: Names, datamart_id: int, position: int, schema: LogicalSchema) -> list[str]:
    """A table's two staging tables, made anew (a table's position may now be another
    table's): the incoming rows (logical columns and `sys_op`), and the rows to publish,
    shaped as `t_actual` (what `ATTACH PARTITION … FROM` requires)."""
    table = schema.tables[position]
    incoming = ", ".join([*(f"{quote(n)} {k}" for n, k in column_types(table)), "sys_op Int8"])
    return [
        f"DROP TABLE IF EXISTS {names.incoming(datamart_id, position)}",
        f"DROP TABLE IF EXISTS {names.publish(datamart_id, position)}",
        f"CREATE TABLE IF NOT EXISTS {names.incoming(datamart_id, position)} ({incoming}) "
        "ENGINE = MergeTree ORDER BY tuple()",
        f"CREATE TABLE IF NOT EXISTS {names.publish(datamart_id, position)} "
        f"({version_columns(table)}) {collapsing(table)}",
    ]
