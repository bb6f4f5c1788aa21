"""The store interface (`replica_store.interface`) is enough to load deltas: a delta staged,
applied and committed through `Store` and `DeltaWrite` alone, on the real PostgreSQL store in
both dialects, leaves the replica equal to the model as of every delta; the store's hold
keeps a second writer out."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.apply_model import ReplicaModel, apply_delta, rows_as_of
from protocol.ddl import parse_schema
from protocol.schema import Table
from protocol.workload import Workload, WorkloadSpec
from replica_store.dialect import Dialect
from replica_store.errors import DatamartInUseError
from replica_store.interface import Store
from replica_store.store import ReplicaStore
from tests.loader.conftest import unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, stage
from tests.loader.store_loads import load

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()


STORES = [*(d.value for d in Dialect), "clickhouse"]


@pytest.mark.parametrize("kind", STORES)
def test_deltas_load_through_the_interface_alone(
    replica_dsn: str, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    schema = unique(parse_schema(DDL))
    clickhouse = kind == "clickhouse"
    store: Store = (
        request.getfixturevalue("adqm_store")
        if clickhouse
        else ReplicaStore(replica_dsn, Dialect(kind))
    )
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
            if not clickhouse:
                assert_matches_model(replica_dsn, model)
    for n in range(3):
        for table in schema:
            as_of = model_as_of(model, table, n)
            assert sorted(store.read_as_of(schema.datamart, table, n)) == sorted(as_of)
    assert [e.delta_num for e in store.registry(schema.datamart)] == [0, 1, 2]
    if not clickhouse:  # (the session's embedded ClickHouse stays open for other tests)
        store.close()


def model_as_of(model: ReplicaModel, table: Table, n: int) -> list[tuple[object, ...]]:
    return list(rows_as_of(model.tables[table.name], n))
