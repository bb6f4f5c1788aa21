"""A load's one connection: kept between loads only when clean, replaced when it broke; big
staging tables analysed with a small sample, and nothing of that left in the session."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession

from protocol.apply_model import ReplicaModel, apply_delta
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_store.apply_statements import ApplyStatements
from replica_store.store_sql import physical
from replica_store.table_apply import ANALYZE_MIN_ROWS
from spark_loader.session import JVM_OPTIONS
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, stage

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()


@pytest.fixture
def schema() -> LogicalSchema:
    return unique(parse_schema(DDL))


def test_a_kept_connection_that_died_is_replaced_and_the_load_applies(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    workload = Workload(schema, WorkloadSpec(rows_per_delta=200, seed=5))
    loader = new_loader(schema, attempts=3)
    model = ReplicaModel(schema)
    for n in range(3):
        rows = workload.next_delta()
        model, _ = apply_delta(model, n, delta_date(n), rows)
        if n == 2:  # the connection kept since delta 1 is killed while idle
            (kept,) = loader.connections._idle
            with psycopg.connect(replica_dsn, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (kept.backend[0],))
        result = loader.load(stage(staging_root, schema, n, rows))
        assert (result.delta_num, result.already_applied) == (n, False)
        assert len(loader.connections._idle) == 1
    assert_matches_model(replica_dsn, model)
    loader.close()
    assert loader.connections._idle == []


def test_big_staging_tables_are_analysed_and_the_session_is_left_clean(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    workload = Workload(schema, WorkloadSpec(rows_per_delta=ANALYZE_MIN_ROWS * 8, seed=3))
    rows = workload.next_delta()
    table = max(schema.tables, key=lambda t: len(rows.get(t.name, ())))
    assert len({r.values[0] for r in rows[table.name]}) >= ANALYZE_MIN_ROWS  # distinct keys
    loader = new_loader(schema)
    loader.load(stage(staging_root, schema, 0, rows, chunk_rows=5000))
    staging = loader._datamarts[schema.datamart].staging(table.name)  # register() resets it
    with psycopg.connect(replica_dsn, autocommit=True) as conn:
        # A truncated table has reltuples -1 until ANALYZE (COPY leaves it alone).
        analysed = conn.execute(
            "SELECT reltuples > 0 FROM pg_class WHERE oid = %s::regclass", (staging,)
        ).fetchone()
    assert analysed == (True,)
    (kept,) = loader.connections._idle
    assert kept.conn.execute("SHOW default_statistics_target").fetchone() == ("100",)
    assert kept.conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
    ).fetchone() == (0,)


def _plan(conn: psycopg.Connection, schema: LogicalSchema, table: str, staging: str) -> str:
    """The plan `conn` would run for the table's apply statement, with its current settings."""
    sql = ApplyStatements(schema.datamart, schema.table(table), staging).one_statement()
    lines = conn.execute(f"EXPLAIN {sql}", {"delta": 1, "prev": 0}).fetchall()
    return "\n".join(line for (line,) in lines)


def test_a_small_staging_table_is_applied_by_key_lookups_whatever_the_statistics_say(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    loader = new_loader(schema)
    with psycopg.connect(replica_dsn, autocommit=True) as conn:
        for table in schema.tables:  # t_actual never analysed, as between autovacuum runs
            actual = physical(schema.datamart, table.name, "actual")
            conn.execute(f"ALTER TABLE {actual} SET (autovacuum_enabled = false)")
    first = Workload(schema, WorkloadSpec(rows_per_delta=30_000, seed=11)).next_delta()
    second = Workload(schema, WorkloadSpec(rows_per_delta=60, seed=12)).next_delta()
    plans: dict[str, tuple[str, str]] = {}

    def explain(conn: psycopg.Connection, table: str) -> None:
        """The plan in the apply transaction, and the one a plain session would choose."""
        staging = loader._datamarts[schema.datamart].staging(table)
        with psycopg.connect(replica_dsn) as other:
            plans[table] = _plan(conn, schema, table, staging), _plan(other, schema, table, staging)

    loader.load(stage(staging_root, schema, 0, first, chunk_rows=5000))
    loader.between_tables = explain
    loader.load(stage(staging_root, schema, 1, second))
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), first)
    model, _ = apply_delta(model, 1, delta_date(1), second)
    assert_matches_model(replica_dsn, model)
    assert set(plans) == {t.name for t in schema.tables if second.get(t.name)}
    for name, (applied, unconstrained) in plans.items():
        # The premise: without statistics, a seq scan of t_actual looks cheaper.
        assert "Hash Join" in unconstrained or "Merge Join" in unconstrained, name
        assert "Hash Join" not in applied, name
        assert "Merge Join" not in applied, name
        assert "Index Scan" in applied or "Index Only Scan" in applied, name


def test_a_big_staging_table_beside_a_small_one_gets_the_planners_own_choice(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path
) -> None:
    rows = dict(
        Workload(schema, WorkloadSpec(rows_per_delta=ANALYZE_MIN_ROWS * 5, seed=4)).next_delta()
    )
    big, small = sorted(rows, key=lambda name: len(rows[name]), reverse=True)[:2]
    rows[small] = rows[small][:50]
    settings: dict[str, tuple[str, str]] = {}

    def record(conn: psycopg.Connection, table: str) -> None:
        row = conn.execute(
            "SELECT current_setting('enable_hashjoin'), current_setting('enable_mergejoin')"
        ).fetchone()
        assert row is not None
        settings[table] = row

    loader = new_loader(schema, between_tables=record)
    loader.load(stage(staging_root, schema, 0, rows, chunk_rows=5000))
    assert settings[big] == ("on", "on")
    assert settings[small] == ("off", "off")
    (kept,) = loader.connections._idle  # nothing of it outlives the transaction
    assert kept.conn.execute("SHOW enable_hashjoin").fetchone() == ("on",)


@pytest.mark.parametrize("spark_where", ["local", "cluster"], indirect=True)
def test_the_loaders_jvms_run_with_the_quick_compiler_only(spark: SparkSession) -> None:
    """`JVM_OPTIONS` reach the JVMs that were started, the driver's and the executors' (in
    local mode the same one), not just the conf."""

    def jvm_arguments(_: object) -> list[str]:
        """In a Python worker (pickled by value: executors cannot import the tests): the
        command line of the JVM that started it (worker, daemon, JVM)."""
        pid = os.getpid()
        while pid > 1:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if Path(words[0].decode()).name == "java":
                return [w.decode() for w in words]
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return []

    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()  # type: ignore[union-attr]
    assert JVM_OPTIONS in list(runtime.getInputArguments())
    (executor,) = spark.sparkContext.parallelize([0], 1).map(jvm_arguments).collect()
    assert JVM_OPTIONS in executor
