"""Every statement the `adb` dialect sends is one Greenplum 6 and 7 accept
(docs/contracts/REPLICA.md, "Statements"), and it gives the tables the `postgresql` dialect gives.

A PostgreSQL server of this module's own logs every statement it receives (the driver's,
the open apply's, the Spark executors' COPY sessions). The loads go through every path:
staged by Spark, staged in the driver, streams applied in pieces while they arrive, streams
prestaged whole. Each logged statement is parsed (sqlglot) and refused if it holds a
writable CTE, `MERGE`, `ON CONFLICT`, `RETURNING`, or an `UPDATE` of a distribution key
column. The DDL for a Greenplum server (not run here: PostgreSQL has no `DISTRIBUTED BY`)
is checked as text.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlglot
from pyspark.sql import SparkSession
from sqlglot import exp

from protocol.apply_model import ReplicaModel, apply_delta
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema
from replica_store.apply_statements import ApplyStatements
from replica_store.dialect import Dialect
from replica_store.embedded_pg import LOAD_SETTINGS, EmbeddedPostgres
from replica_store.pieces import gone_sql
from replica_store.store import ReplicaStore
from replica_store.store_sql import create_staging_sql, meta_ddl, store_ddl, temp_staging_sql
from spark_loader.loader import DeltaLoader
from spark_loader.prestage import Prestager
from spark_loader.settings import LoaderSettings
from tests.loader.conftest import unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, snapshot, stage
from tests.loader.test_pieces import Rows, prestage_in_pieces, workload_deltas

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()
#: Where a log entry of the server starts (its default `log_line_prefix`, '%m [%p] ').
ENTRY = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \S+ \[\d+\] ", re.M)
STATEMENT = re.compile(r"LOG:  (?:statement|execute [^:]*): (.*)", re.S)
#: The one statement sqlglot does not read: a binary COPY into staging.
COPY = re.compile(r'COPY "[^"]+"\."[^"]+" \([^()]*\) FROM STDIN \(FORMAT BINARY\)\Z')
FORBIDDEN_WORDS = re.compile(r"\b(RETURNING|ON\s+CONFLICT|MERGE)\b", re.I)


@pytest.fixture(scope="module")
def logged_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    settings = LOAD_SETTINGS | {"log_statement": "all"}
    server = EmbeddedPostgres(tmp_path_factory.mktemp("adb") / "pgdata", server_settings=settings)
    with server:
        yield server


def logged_statements(server: EmbeddedPostgres) -> list[str]:
    text = (server.data_dir / "server.log").read_text()
    starts = [m.start() for m in ENTRY.finditer(text)] + [len(text)]
    entries = (text[a:b] for a, b in itertools.pairwise(starts))
    return [m.group(1).strip() for e in entries if (m := STATEMENT.search(e))]


def violations(statement: str, distribution_columns: set[str]) -> list[str]:
    """What in `statement` the "Statements" list forbids."""
    if COPY.match(statement):
        return []
    found = []
    for tree in sqlglot.parse(statement, read="postgres"):
        if tree is None:
            continue
        if isinstance(tree, exp.Command):  # sqlglot kept it as text (CREATE … ON COMMIT)
            found += [f"{w} in {statement[:80]}" for w in FORBIDDEN_WORDS.findall(str(tree))]
            continue
        for cte in tree.find_all(exp.CTE):
            if isinstance(cte.this, exp.Insert | exp.Update | exp.Delete):
                found.append(f"a writable CTE in {statement[:80]}")
        for node in tree.find_all(exp.Merge, exp.OnConflict, exp.Returning):
            found.append(f"{type(node).__name__} in {statement[:80]}")
        for update in tree.find_all(exp.Update):
            for assignment in update.expressions:
                if assignment.this.name in distribution_columns:
                    found.append(f"an UPDATE of {assignment.this.name} in {statement[:80]}")
    return found


def test_the_checker_sees_what_the_list_forbids() -> None:
    """Else the test below proves nothing."""
    schema = parse_schema(DDL)
    table = schema.table("sales")
    pg = ApplyStatements("dm", table, '"s"', '"g"').one_statement()
    assert any("writable CTE" in v for v in violations(pg, set()))
    assert violations("INSERT INTO t VALUES (1) ON CONFLICT (a) DO NOTHING", set())
    assert violations("DELETE FROM t USING s WHERE t.a = s.a RETURNING t.a", set())
    assert violations("UPDATE t SET id = 2 FROM s WHERE t.id = s.id", {"id"})
    assert violations("CREATE TEMP TABLE x (a int) ON COMMIT DROP RETURNING", set())
    assert not violations('COPY "a"."b" ("x", sys_op) FROM STDIN (FORMAT BINARY)', set())


def test_every_statement_of_every_load_path_is_one_greenplum_accepts(
    logged_server: EmbeddedPostgres, spark: SparkSession, tmp_path: Path
) -> None:
    schema = unique(parse_schema(DDL))
    deltas = workload_deltas(schema, seed=31, count=4)
    tables = run_every_path(logged_server.dsn, spark, schema, deltas, Dialect.ADB, tmp_path)
    statements = logged_statements(logged_server)
    applied = [s for s in statements if "_history" in s and s.startswith("INSERT INTO")]
    assert len(applied) >= 4 * len(schema.tables), "the log holds no apply: nothing checked"
    assert any(s.startswith("COPY") for s in statements)
    assert any(s.startswith("UPDATE") and "_history" in s for s in statements), "no flip"
    keys = {"datamart"} | {k for t in schema for k in (*t.primary_key, *t.distributed_by)}
    found = [v for s in statements for v in violations(s, keys)]
    assert found == []

    same = schema.model_copy(update={"datamart": f"{schema.datamart}_pg"})
    pg_tables = run_every_path(logged_server.dsn, spark, same, deltas, Dialect.POSTGRESQL, tmp_path)
    assert tables == pg_tables


def run_every_path(
    dsn: str,
    spark: SparkSession,
    schema: LogicalSchema,
    deltas: list[Rows],
    dialect: Dialect,
    tmp_path: Path,
) -> object:
    """Delta 0 staged by Spark, 1 in the driver, 2 in interleaved pieces, 3 prestaged whole;
    the replica equal to the model after each; every version of every table at the end."""
    root = tmp_path / dialect.value
    loaders = [
        DeltaLoader(
            ReplicaStore(dsn, dialect),
            spark,
            LoaderSettings(
                data_dir=root / "var", staging_dir=root / "staging", in_driver_max_mib=mib
            ),
        )
        for mib in (0, 2**20)
    ]
    for loader in loaders:
        loader.register(schema)
    by_spark, in_driver = loaders
    model = ReplicaModel(schema)
    for n, rows in enumerate(deltas):
        transfer = stage(root / "staging", schema, n, rows, chunk_rows=20)
        if n == 0:
            by_spark.load(transfer)
        elif n == 1:
            in_driver.load(transfer)
        else:
            cuts = (2, 4) if n == 2 else (10**6,)
            by_spark.load(transfer, prestage_in_pieces(Prestager(by_spark), transfer, cuts))
        model, _ = apply_delta(model, n, delta_date(n), rows)
        assert_matches_model(dsn, model)
    return snapshot(dsn, schema)


def test_the_ddl_for_a_greenplum_server_distributes_every_table_by_its_key() -> None:
    schema = parse_schema(DDL)
    created = [meta_ddl(True), *store_ddl(True, schema)]
    for position, table in enumerate(schema.tables):
        created.append(create_staging_sql(True, 7, position, table))
        created.append(temp_staging_sql(True, 7, position, table)[1])
        created.append(gone_sql(True, table, '"pg_temp"."g"'))
    creates_table = re.compile(r"CREATE (UNLOGGED |TEMP )?TABLE ")
    tables = [s for text in created for s in text.split(";\n") if creates_table.match(s)]
    assert len(tables) == 6 + 5 * len(schema.tables)
    for statement in tables:
        match = re.search(r"DISTRIBUTED BY \(([^()]*)\)\Z", statement.strip())
        assert match, f"not distributed: {statement[:80]}"
        key = re.search(r"PRIMARY KEY \(([^()]*)\)", statement)
        if key:  # Greenplum: the distribution key is part of every unique constraint
            assert _names(match.group(1)) <= _names(key.group(1)), statement
        assert "UNIQUE" not in statement
    assert "DISTRIBUTED" not in " ".join([meta_ddl(False), *store_ddl(False, schema)])


def _names(listed: str) -> set[str]:
    return {n.strip('"') for n in listed.split(", ")}
