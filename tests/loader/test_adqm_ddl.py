"""The ADQM store's DDL for a cluster (`ON CLUSTER`, shards and a `Distributed` table): the
embedded engine has no cluster to run it on, so it is held here to what a cluster needs
and parsed as ClickHouse SQL (sqlglot)."""

from __future__ import annotations

import sqlglot

from protocol.ddl import parse_schema
from replica_store.adqm.layout import meta_ddl, table_ddl, view_ddl
from replica_store.adqm.names import Names
from tests.loader.test_adqm_store import DDL


def test_a_cluster_gets_shards_a_distributed_table_and_every_statement_on_cluster() -> None:
    schema = parse_schema(DDL)
    names = Names("env__")
    statements = [
        *meta_ddl(names, "analytics"),
        *table_ddl(names, schema, "analytics"),
        *view_ddl(names, schema, "analytics"),
    ]
    for statement in statements:
        assert " ON CLUSTER `analytics`" in statement, statement
        sqlglot.parse_one(statement.replace("{n:Int64}", "1"), read="clickhouse")
    tables = table_ddl(names, schema, "analytics")
    shard = next(s for s in tables if "`orders_actual_shard` ON CLUSTER" in s)
    assert "ENGINE = CollapsingMergeTree(sign) ORDER BY (`id`, `region`, sys_from, sys_to)" in shard
    distributed = next(s for s in tables if "`orders_actual` ON CLUSTER" in s)
    assert (
        "AS `env__dm`.`orders_actual_shard` ENGINE = Distributed('analytics', 'env__dm', "
        "'orders_actual_shard', cityHash64(`id`, `region`))"
    ) in distributed


def test_without_a_cluster_there_is_one_collapsing_table_per_table() -> None:
    schema = parse_schema(DDL)
    tables = table_ddl(Names(), schema)
    assert not any("ON CLUSTER" in s or "Distributed" in s for s in tables)
    assert sum("CollapsingMergeTree(sign)" in s for s in tables) == len(schema.tables)
