"""A small delta staged in its own apply transaction (`spark_loader.temp_staging`): the
datamart's staging tables untouched, one transaction, and nothing of a refused delta."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from protocol.apply_model import ReplicaModel, apply_delta
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, stage

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()

pytestmark = pytest.mark.parametrize("spark_where", ["local", "driver"], indirect=True)


@pytest.fixture
def schema() -> LogicalSchema:
    return unique(parse_schema(DDL))


def staged_rows(dsn: str, staging: list[str]) -> int:
    with psycopg.connect(dsn) as conn:
        return sum(conn.execute(f"SELECT count(*) FROM {s}").fetchone()[0] for s in staging)  # type: ignore[index]


def test_a_small_delta_leaves_the_staging_tables_alone_and_loads_exactly(
    new_loader: NewLoader,
    schema: LogicalSchema,
    staging_root: Path,
    replica_dsn: str,
    spark_where: str,
) -> None:
    """In the driver, staged in the apply's transaction: no row ever reaches the datamart's
    staging tables (before, every load left its rows there). Spark's executors stage into
    them, as before."""
    workload = Workload(schema, WorkloadSpec(rows_per_delta=400, seed=21))
    loader = new_loader(schema)
    datamart = loader.datamart(schema.datamart)
    assert datamart is not None
    staging = [datamart.staging(t.name) for t in schema.tables]
    model = ReplicaModel(schema)
    for n in range(3):  # one kept connection: its temporary tables reused, emptied
        rows = workload.next_delta()
        model, _ = apply_delta(model, n, delta_date(n), rows)
        loader.load(stage(staging_root, schema, n, rows, chunk_rows=90))
    assert_matches_model(replica_dsn, model)
    if spark_where == "driver":
        assert staged_rows(replica_dsn, staging) == 0
    else:
        assert staged_rows(replica_dsn, staging) > 0
