"""The loader on a ClickHouse replica (`AdqmLoader`): slices decoded by Spark tasks (local
mode, small slices so that a table has several) or by the driver, handed to the one
writer as Arrow, and published; the result equals the model as of every delta, with the
protocol's answers for a bad chunk, a delta out of order and one applied twice."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from protocol.apply_model import ReplicaModel, apply_delta
from protocol.ddl import parse_schema
from protocol.errors import BadChunkError, ErrorCode, ProtocolError
from replica_store.adqm.store import AdqmStore
from spark_loader.adqm_loader import AdqmLoader
from spark_loader.settings import LoaderSettings
from tests.loader.conftest import unique
from tests.loader.staging_helpers import delta_date, stage
from tests.loader.test_adqm_store import DDL, assert_as_of_every_delta, random_delta


def loader_for(
    store: AdqmStore, spark: SparkSession, tmp_path: Path, where: str, schema_ddl: str = DDL
) -> tuple[AdqmLoader, ReplicaModel]:
    settings = LoaderSettings(
        data_dir=tmp_path / "var",
        staging_dir=tmp_path / "staging",
        clickhouse_in_driver_max_mib=2**20 if where == "driver" else 0,
        max_slice_mib=0.001,  # a few KiB: every table in several slices
        load_attempts=2,
        retry_backoff_seconds=0.05,
    )
    loader = AdqmLoader(store, spark, settings)
    schema = unique(parse_schema(schema_ddl))
    loader.register(schema)
    return loader, ReplicaModel(schema)


@pytest.mark.parametrize("where", ["spark", "driver"])
def test_deltas_loaded_by_spark_or_the_driver_equal_the_model(
    adqm_store: AdqmStore, spark: SparkSession, tmp_path: Path, where: str
) -> None:
    loader, model = loader_for(adqm_store, spark, tmp_path, where)
    schema, rng = model.schema, random.Random(3)
    for n in range(4):
        rows = random_delta(rng, 300)
        result = loader.load(stage(tmp_path / "in", schema, n, rows, chunk_rows=25))
        model, counts = apply_delta(model, n, delta_date(n), rows)
        assert list(result.tables) == counts
        assert not result.already_applied
    assert_as_of_every_delta(adqm_store, model, 3)


def test_a_delta_applied_twice_is_answered_from_the_registry(
    adqm_store: AdqmStore, spark: SparkSession, tmp_path: Path
) -> None:
    loader, model = loader_for(adqm_store, spark, tmp_path, "driver")
    rows = random_delta(random.Random(4), 50)
    transfer = stage(tmp_path / "in", model.schema, 0, rows)
    first = loader.load(transfer)
    again = loader.load(transfer)
    assert again.already_applied
    assert again.tables == first.tables
    model, _ = apply_delta(model, 0, delta_date(0), rows)
    assert_as_of_every_delta(adqm_store, model, 0)


def test_a_delta_out_of_order_is_refused_and_changes_nothing(
    adqm_store: AdqmStore, spark: SparkSession, tmp_path: Path
) -> None:
    loader, model = loader_for(adqm_store, spark, tmp_path, "driver")
    with pytest.raises(ProtocolError) as refused:
        loader.load(stage(tmp_path / "in", model.schema, 1, random_delta(random.Random(5), 20)))
    assert refused.value.code is ErrorCode.OUT_OF_SEQUENCE
    assert adqm_store.last_applied(model.schema.datamart) is None


@pytest.mark.parametrize("where", ["spark", "driver"])
def test_a_bad_chunk_is_bad_chunk_and_changes_nothing(
    adqm_store: AdqmStore, spark: SparkSession, tmp_path: Path, where: str
) -> None:
    loader, model = loader_for(adqm_store, spark, tmp_path, where)
    schema, rng = model.schema, random.Random(6)
    rows = random_delta(rng, 100)
    loader.load(stage(tmp_path / "in", schema, 0, rows, chunk_rows=10))
    model, _ = apply_delta(model, 0, delta_date(0), rows)
    transfer = stage(tmp_path / "in", schema, 1, random_delta(rng, 100), chunk_rows=10)
    path = transfer.chunks_of("orders")[2][1]
    path.write_bytes(path.read_bytes()[:-7])  # a truncated Avro container
    with pytest.raises(BadChunkError) as refused:
        loader.load(transfer)
    assert refused.value.chunk == ("orders", 3)
    assert adqm_store.last_applied(schema.datamart).delta_num == 0  # type: ignore[union-attr]
    assert_as_of_every_delta(adqm_store, model, 1)
