"""Streams staged while their transfer still arrives (`spark_loader.prestage`), on a real
SparkSession and PostgreSQL, staged by Spark and in the driver: the load applies a
prestaged table without staging it again, and a prestage never changes what a load does
(another transfer of the delta, a bad chunk, a delta not expected next, a load running)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from protocol.apply_model import ReplicaModel, apply_delta
from protocol.ddl import parse_schema
from protocol.errors import ErrorCode, ProtocolError
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from spark_loader.prestage import Prestager
from spark_loader.store_sql import META_SCHEMA, datamart_lock_key, q
from spark_loader.transfer import StagedTransfer
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, snapshot, stage

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()

pytestmark = pytest.mark.parametrize("spark_where", ["local", "driver"], indirect=True)


@pytest.fixture
def schema() -> LogicalSchema:
    return unique(parse_schema(DDL))


def streams_of(transfer: StagedTransfer, count: int) -> StagedTransfer:
    """The transfer as it is while only its first `count` streams are complete."""
    streams = transfer.manifest.streams[:count]
    return StagedTransfer(
        transfer.directory, transfer.manifest.model_copy(update={"streams": streams})
    )


def markers(dsn: str, datamart: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            f"SELECT table_name, request_id FROM {q(META_SCHEMA)}.staged_stream "
            "WHERE datamart = %s",
            (datamart,),
        ).fetchall()
    return {str(t): str(r) for t, r in rows}


def test_a_prestaged_table_is_applied_without_staging_it_again(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=7)).next_delta()
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=60)
    loader = new_loader(schema)
    first = transfer.manifest.streams[0]
    assert Prestager(loader).prestage(streams_of(transfer, 1)) == [first.table_name]
    assert markers(replica_dsn, schema.datamart) == {first.table_name: transfer.manifest.request_id}
    for _, path in transfer.chunks_of(first.table_name):
        path.unlink()  # the load must not need them: their rows are staged

    result = loader.load(transfer)
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
    assert_matches_model(replica_dsn, model)
    assert sum(c.rows_received for c in result.tables) == sum(len(r) for r in rows.values())
    assert set(markers(replica_dsn, schema.datamart)) == {first.table_name}


def test_another_transfer_of_the_delta_stages_its_own_rows(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    workload = Workload(schema, WorkloadSpec(rows_per_delta=200, seed=8))
    abandoned = stage(staging_root, schema, 0, workload.next_delta(), chunk_rows=50)
    loader = new_loader(schema)
    assert Prestager(loader).prestage(abandoned)  # every stream of it
    rows = Workload(schema, WorkloadSpec(rows_per_delta=200, seed=9)).next_delta()

    loader.load(stage(staging_root, schema, 0, rows, chunk_rows=50))
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
    assert_matches_model(replica_dsn, model)
    assert markers(replica_dsn, schema.datamart) == {}  # every table staged again


def test_a_bad_chunk_is_not_prestaged_and_the_load_refuses_it(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    rows = Workload(schema, WorkloadSpec(rows_per_delta=200, seed=10)).next_delta()
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=50)
    first = transfer.manifest.streams[0]
    transfer.chunks_of(first.table_name)[-1][1].write_bytes(b"not an avro container")
    loader = new_loader(schema)
    before = snapshot(replica_dsn, schema)

    assert Prestager(loader).prestage(streams_of(transfer, 1)) == []
    assert markers(replica_dsn, schema.datamart) == {}
    with pytest.raises(ProtocolError) as refused:
        loader.load(transfer)
    assert refused.value.code is ErrorCode.BAD_CHUNK
    assert snapshot(replica_dsn, schema) == before


def test_nothing_is_prestaged_out_of_sequence_or_while_a_load_holds_the_datamart(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    workload = Workload(schema, WorkloadSpec(rows_per_delta=100, seed=11))
    zero, one = workload.next_delta(), workload.next_delta()
    loader = new_loader(schema)
    prestager = Prestager(loader)
    assert prestager.prestage(stage(staging_root, schema, 1, one)) == []  # 0 comes first
    transfer = stage(staging_root, schema, 0, zero)
    with psycopg.connect(replica_dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (datamart_lock_key(schema.datamart),))
        assert prestager.prestage(transfer) == []
    assert markers(replica_dsn, schema.datamart) == {}
    assert prestager.prestage(transfer) == [s.table_name for s in transfer.manifest.streams]


def test_streams_prestaged_in_any_order_then_loaded_equal_the_model(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """The origin may send its streams in any order: the last first, then the first two;
    the load stages only the rest, and the replica is as if nothing had been prestaged."""
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=12)).next_delta()
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=45)
    streams = transfer.manifest.streams
    assert len(streams) >= 3
    loader = new_loader(schema)
    prestager = Prestager(loader)
    for part in ((streams[-1],), streams[:2]):
        partial = transfer.manifest.model_copy(update={"streams": part})
        assert prestager.prestage(StagedTransfer(transfer.directory, partial)) == [
            s.table_name for s in part
        ]
    loader.load(transfer)
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
    assert_matches_model(replica_dsn, model)
    assert set(markers(replica_dsn, schema.datamart)) == {
        s.table_name for s in (*streams[:2], streams[-1])
    }
