"""A load's one connection: kept between loads only when clean, replaced when it broke; big
staging tables analysed with a small sample, and nothing of that left in the session."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from protocol.apply_model import ReplicaModel, apply_delta
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from spark_loader.loader import ANALYZE_MIN_ROWS
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
    assert kept.conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                             "AND pid = pg_backend_pid()").fetchone() == (0,)  # fmt: skip
