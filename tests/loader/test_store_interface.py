"""The store interface (`replica_store.interface`) is enough to load deltas: a delta staged,
applied and committed through `Store` and `DeltaWrite` alone, on the real PostgreSQL store in
both dialects, leaves the replica equal to the model as of every delta; the store's hold
keeps a second writer out."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from protocol.apply_model import ReplicaModel, apply_delta, rows_as_of
from protocol.body import decode_body
from protocol.ddl import parse_schema
from protocol.schema import Table
from protocol.workload import Workload, WorkloadSpec
from replica_store.dialect import Dialect
from replica_store.errors import DatamartInUseError
from replica_store.interface import Store
from replica_store.layout import Datamart
from replica_store.lost_commit import LoadResult
from replica_store.store import ReplicaStore
from replica_store.transfer import StagedTransfer
from tests.loader.conftest import unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, stage

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()


def last_row_per_key(table: Table, transfer: StagedTransfer) -> tuple[pa.RecordBatch, int]:
    """The table's rows of the delta, the last one per key (chunk, then position order),
    and how many rows it received."""
    last: dict[tuple[object, ...], dict[str, object]] = {}
    schema, received = None, 0
    for _, path in transfer.chunks_of(table.name):
        for batch in decode_body(table, path.read_bytes()):
            schema, received = batch.schema, received + batch.num_rows
            for row in batch.to_pylist():
                last[tuple(row[k] for k in table.primary_key)] = row
    assert schema is not None
    return pa.RecordBatch.from_pylist(list(last.values()), schema=schema), received


def load(store: Store, datamart: Datamart, transfer: StagedTransfer) -> LoadResult:
    write = store.begin_delta(datamart, transfer.manifest)
    assert write.lock(wait=True)
    assert write.registered() is None
    write.begin()
    tables = list(datamart.schema)
    for table in tables:
        rows, received = last_row_per_key(table, transfer)
        relation, staged = write.stage(table, [rows])
        write.apply(table, staged, received, staging=relation)
    return write.commit(transfer, tables, settle_seconds=5)


@pytest.mark.parametrize("dialect", list(Dialect))
def test_deltas_load_through_the_interface_alone(
    replica_dsn: str, tmp_path: Path, dialect: Dialect
) -> None:
    schema = unique(parse_schema(DDL))
    store: Store = ReplicaStore(replica_dsn, dialect)
    datamart = store.ensure(schema)
    workload = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=41))
    model = ReplicaModel(schema)
    with store.hold([schema.datamart], "test"):
        with pytest.raises(DatamartInUseError):
            store.hold([schema.datamart], "second").acquire()
        for n in range(3):
            rows = workload.next_delta()
            result = load(store, datamart, stage(tmp_path, schema, n, rows, chunk_rows=40))
            model, counts = apply_delta(model, n, delta_date(n), rows)
            by_name = {c.table_name: c for c in counts}
            assert {c.table_name: c for c in result.tables} == by_name
            assert_matches_model(replica_dsn, model)
    for n in range(3):
        for table in schema:
            as_of = model_as_of(model, table, n)
            assert sorted(store.read_as_of(schema.datamart, table, n)) == sorted(as_of)
    assert [e.delta_num for e in store.registry(schema.datamart)] == [0, 1, 2]
    store.close()


def model_as_of(model: ReplicaModel, table: Table, n: int) -> list[tuple[object, ...]]:
    return list(rows_as_of(model.tables[table.name], n))
