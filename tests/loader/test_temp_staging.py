"""A small delta staged in its own apply transaction (`spark_loader.temp_staging`): the
datamart's staging tables untouched, one transaction, and nothing of a refused delta."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from protocol.apply_model import DeltaRow, ReplicaModel, apply_delta
from protocol.ddl import parse_schema
from protocol.errors import ErrorCode, ProtocolError
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from spark_loader.store import ReplicaStore
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, snapshot, stage

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()

pytestmark = pytest.mark.parametrize("spark_where", ["local", "driver"], indirect=True)


@pytest.fixture
def schema() -> LogicalSchema:
    return unique(parse_schema(DDL))


def staged_rows(dsn: str, staging: list[str]) -> int:
    with psycopg.connect(dsn) as conn:
        return sum(conn.execute(f"SELECT count(*) FROM {s}").fetchone()[0] for s in staging)  # type: ignore[index]


def test_a_small_delta_leaves_the_staging_tables_alone_and_loads_exactly(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str,
    spark_where: str,
) -> None:  # fmt: skip
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


def test_a_bad_chunk_in_the_last_table_rolls_back_what_was_staged_and_applied_before_it(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    workload = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=22))
    loader = new_loader(schema)
    first = workload.next_delta()
    loader.load(stage(staging_root, schema, 0, first, chunk_rows=70))
    before = snapshot(replica_dsn, schema)
    second = dict(workload.next_delta())
    last = max((n for n in second if second[n]), key=[t.name for t in schema.tables].index)
    bad = DeltaRow(second[last][0].values, 2)  # sys_op 2: refused when decoded
    second[last] = [*second[last], bad]
    with pytest.raises(ProtocolError) as caught:
        loader.load(stage(staging_root, schema, 1, second, chunk_rows=70))
    assert caught.value.code in (ErrorCode.SCHEMA_MISMATCH, ErrorCode.BAD_CHUNK)
    assert snapshot(replica_dsn, schema) == before
    assert [e.delta_num for e in ReplicaStore(replica_dsn).registry(schema.datamart)] == [0]
    # The connection that served the refused load (or its successor) loads the next.
    good = workload.next_delta()
    loader.load(stage(staging_root, schema, 1, good, chunk_rows=70))
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), first)
    model, _ = apply_delta(model, 1, delta_date(1), good)
    assert_matches_model(replica_dsn, model)
