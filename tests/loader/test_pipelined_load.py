"""A big delta's load applies table k while Spark stages table k + 1 (`staging_steps`,
`run_ahead`), on a real SparkSession and PostgreSQL: the overlap happens, and a table
refused after earlier ones were applied still leaves the replica as it was."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from protocol.apply_model import DeltaRow, ReplicaModel, apply_delta
from protocol.ddl import parse_schema
from protocol.errors import SchemaMismatchError
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_store.store import ReplicaStore
from spark_loader import slice_jobs
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, snapshot, stage

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()


@pytest.fixture
def schema() -> LogicalSchema:
    return unique(parse_schema(DDL))


def test_the_first_table_is_applied_before_the_second_is_staged(
    new_loader: NewLoader,
    schema: LogicalSchema,
    staging_root: Path,
    replica_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=5)).next_delta()
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=70)
    assert len(transfer.manifest.streams) >= 2
    first_applied = threading.Event()
    jobs: list[int] = []
    real = slice_jobs.stage_slices

    def second_waits_for_the_first_apply(*args: object) -> object:
        jobs.append(len(jobs))
        if len(jobs) == 2:  # staged one after the other, this wait would never end
            assert first_applied.wait(60), "the second table was staged before any apply"
        return real(*args)  # type: ignore[arg-type]

    def applied(conn: psycopg.Connection, table: str) -> None:
        first_applied.set()

    monkeypatch.setattr("spark_loader.staging_steps.stage_slices", second_waits_for_the_first_apply)
    streams = len(transfer.manifest.streams)
    result = new_loader(schema, between_tables=applied, staging_jobs=streams).load(transfer)
    assert len(jobs) >= 2  # the second job waited for the first table's apply
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
    assert_matches_model(replica_dsn, model)
    assert sum(c.rows_received for c in result.tables) == sum(len(r) for r in rows.values())


@pytest.mark.parametrize("spark_where", ["local", "driver"], indirect=True)
def test_a_later_table_refused_after_earlier_ones_were_applied_changes_nothing(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """Staged by Spark, or in the driver inside the apply transaction (`temp_staging`): the
    refusal rolls back what was staged and applied before it, and the loader goes on."""
    workload = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=6))
    loader = new_loader(schema)
    first = workload.next_delta()
    loader.load(stage(staging_root, schema, 0, first, chunk_rows=70))
    before = snapshot(replica_dsn, schema)
    rows = workload.next_delta()
    assert rows.get("sales"), "sales (before stores) has rows to apply"
    bad = DeltaRow((2, None, None, None, None), 2)  # sys_op 2
    rows["stores"] = [*rows.get("stores", []), bad]
    transfer = stage(staging_root, schema, 1, rows, chunk_rows=70)
    names = [s.table_name for s in transfer.manifest.streams]
    assert names.index("sales") < names.index("stores")
    with pytest.raises(SchemaMismatchError, match="sys_op is 2"):
        loader.load(transfer)
    assert snapshot(replica_dsn, schema) == before
    assert [e.delta_num for e in ReplicaStore(replica_dsn).registry(schema.datamart)] == [0]
    good = workload.next_delta()
    loader.load(stage(staging_root, schema, 1, good, chunk_rows=70))
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), first)
    model, _ = apply_delta(model, 1, delta_date(1), good)
    assert_matches_model(replica_dsn, model)
