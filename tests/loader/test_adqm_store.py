"""The ADQM store (ClickHouse, embedded chdb) against the apply-semantics model: the same
deltas give the same rows as of every delta, whatever merges run and wherever a load
stops; bad values and names are refused before anything is written."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest

from protocol.apply_model import DELETE, UPSERT, DeltaRow, ReplicaModel, apply_delta, rows_as_of
from protocol.ddl import parse_schema
from protocol.errors import SchemaMismatchError
from protocol.schema import LogicalSchema
from replica_store.adqm.names import Names, literal
from replica_store.adqm.store import AdqmStore
from replica_store.errors import LoaderError, UnsupportedSchemaError
from replica_store.layout import Datamart
from replica_store.transfer import StagedTransfer
from tests.loader.conftest import unique
from tests.loader.staging_helpers import delta_date, stage
from tests.loader.store_loads import last_row_per_key, load

DDL = """
CREATE TABLE dm.orders (
  id bigint not null, region varchar(8) not null, amount double, units int32, ok boolean,
  price float, day date, at time, ts timestamp, ref uuid, note varchar,
  PRIMARY KEY (id, region)
) DISTRIBUTED BY (id);
CREATE TABLE dm.items (sku bigint not null, title varchar(64), PRIMARY KEY (sku));
"""

#: Edge values per column of `orders` (besides null): the bounds of each ClickHouse type.
EDGES: dict[str, list[Any]] = {
    "amount": [0.0, -1.5e308, 1.5e308, 2.5],
    "units": [-(2**31), 2**31 - 1, 0],
    "ok": [True, False],
    "price": [0.5, -2.25, 1024.0],
    "day": [date(1900, 1, 1), date(2299, 12, 31), date(1970, 1, 1)],
    "at": [time(0, 0), time(23, 59, 59, 999999), time(12, 0, 0, 1)],
    "ts": [
        datetime(1900, 1, 1),
        datetime(2299, 12, 31, 23, 59, 59, 999999),
        datetime(2026, 5, 1, 12, 0, 0, 123456),
    ],
    "ref": [str(uuid.UUID(int=0)), "123e4567-e89b-12d3-a456-426614174000"],
    "note": ["", "naïve ☃", "x" * 300],
}
IDS = [-(2**63), 2**63 - 1, 0, 1, 2, 3, 4, 5]
REGIONS = ["eu", "us", ""]


def orders_row(rng: random.Random, key: tuple[int, str]) -> tuple[Any, ...]:
    values = [rng.choice([None, *EDGES[name]]) for name in EDGES]
    return (*key, *values)


def random_delta(rng: random.Random, size: int) -> dict[str, list[DeltaRow]]:
    """Rows over a small key space, so that keys are inserted, updated, deleted, deleted
    while absent and inserted again, often several times in one delta."""
    orders = []
    for _ in range(size):
        key = (rng.choice(IDS), rng.choice(REGIONS))
        op = DELETE if rng.random() < 0.3 else UPSERT
        orders.append(DeltaRow(orders_row(rng, key), op))
    items = []
    for _ in range(size // 2):
        op = DELETE if rng.random() < 0.3 else UPSERT
        items.append(DeltaRow((rng.randrange(6), rng.choice([None, "a", "b"])), op))
    return {"orders": orders, "items": items}


def assert_as_of_every_delta(store: AdqmStore, model: ReplicaModel, through: int) -> None:
    for n in range(through + 1):
        for table in model.schema:
            expected = rows_as_of(model.tables[table.name], n)
            found = store.read_as_of(model.schema.datamart, table, n)
            assert len(found) == len(set(found)), f"{table.name} as of {n}: duplicate rows"
            assert set(found) == expected, f"{table.name} as of {n}"


class Merging:
    """The store's client, forcing a merge of every table (`OPTIMIZE … FINAL`) after each
    statement it runs: whatever ClickHouse merges, and whenever, changes nothing."""

    def __init__(self, client: Any, store: AdqmStore, schema: LogicalSchema) -> None:
        self._client, self._store, self._schema = client, store, schema

    def command(self, statement: str) -> Any:
        result = self._client.command(statement)
        for table in self._schema:
            actual = self._store.names.actual(self._schema.datamart, table.name)
            self._client.command(f"OPTIMIZE TABLE {actual} FINAL")
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.mark.parametrize(
    "merge_always", [False, True], ids=["merges-as-they-come", "merge-after-every-statement"]
)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_deltas_equal_the_model_as_of_every_delta(
    adqm_store: AdqmStore, tmp_path: Path, seed: int, merge_always: bool
) -> None:
    schema = unique(parse_schema(DDL))
    datamart = adqm_store.ensure(schema)
    client = adqm_store.client
    if merge_always:
        adqm_store.client = Merging(client, adqm_store, schema)
    try:
        rng, model = random.Random(seed), ReplicaModel(schema)
        for n in range(6):
            rows = random_delta(rng, 40)
            result = load(adqm_store, datamart, stage(tmp_path, schema, n, rows, chunk_rows=7))
            model, counts = apply_delta(model, n, delta_date(n), rows)
            assert list(result.tables) == counts
            assert_as_of_every_delta(adqm_store, model, n)
    finally:
        adqm_store.client = client


def publish_without_registering(
    store: AdqmStore, datamart: Datamart, transfer: StagedTransfer, tables: int
) -> None:
    """A load that published `tables` tables, then stopped as a killed process does: no
    registry row, no rollback, its writer let go only because the process is gone."""
    write = store.begin_delta(datamart, transfer.manifest)
    assert write.lock(wait=True)
    write.begin()
    for table in list(datamart.schema)[:tables]:
        rows, received = last_row_per_key(table, transfer)
        relation, staged = write.stage(table, rows)
        write.apply(table, staged, received, staging=relation)
    store.writer(datamart.name).release()


@pytest.mark.parametrize("published", [1, 2])
def test_a_delta_published_and_not_registered_is_undone_and_loads_again(
    adqm_store: AdqmStore, tmp_path: Path, published: int
) -> None:
    schema = unique(parse_schema(DDL))
    datamart = adqm_store.ensure(schema)
    rng, model = random.Random(7), ReplicaModel(schema)
    for n in range(3):
        rows = random_delta(rng, 30)
        load(adqm_store, datamart, stage(tmp_path, schema, n, rows))
        model, _ = apply_delta(model, n, delta_date(n), rows)
    rows = random_delta(rng, 30)
    transfer = stage(tmp_path, schema, 3, rows)
    publish_without_registering(adqm_store, datamart, transfer, published)
    assert_as_of_every_delta(adqm_store, model, 2)  # reads as of registered deltas: unchanged
    assert adqm_store.ensure(schema) == datamart  # a restart: the undo runs here
    assert_as_of_every_delta(adqm_store, model, 3)  # nothing of delta 3 is left
    adqm_store.optimize(schema)
    assert_as_of_every_delta(adqm_store, model, 3)
    load(adqm_store, datamart, transfer)
    model, _ = apply_delta(model, 3, delta_date(3), rows)
    assert_as_of_every_delta(adqm_store, model, 3)


def test_a_failed_table_rolls_the_delta_back_and_the_replica_is_unchanged(
    adqm_store: AdqmStore, tmp_path: Path
) -> None:
    schema = unique(parse_schema(DDL))
    datamart = adqm_store.ensure(schema)
    rng, model = random.Random(11), ReplicaModel(schema)
    rows = random_delta(rng, 30)
    load(adqm_store, datamart, stage(tmp_path, schema, 0, rows))
    model, _ = apply_delta(model, 0, delta_date(0), rows)
    transfer = stage(tmp_path, schema, 1, random_delta(rng, 30))
    write = adqm_store.begin_delta(datamart, transfer.manifest)
    assert write.lock(wait=True)
    write.begin()
    orders, items = list(datamart.schema)
    rows_orders, received = last_row_per_key(orders, transfer)
    relation, staged = write.stage(orders, rows_orders)
    write.apply(orders, staged, received, staging=relation)
    with pytest.raises(LoaderError, match="rows staged"):
        write.apply(items, staged + 1, 0)  # a count that disagrees with staging: refused
    write.roll_back(failed=True)
    assert adqm_store.last_applied(schema.datamart) is not None
    assert_as_of_every_delta(adqm_store, model, 1)
    assert write.lock(wait=False)  # the writer was let go
    write.roll_back()


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("day", date(1899, 12, 31), "not a date from 1900-01-01"),
        ("day", date(2300, 1, 1), "not a date from 1900-01-01"),
        ("ts", datetime(1899, 12, 31, 23, 59, 59, 999999), "not a timestamp from 1900-01-01"),
        ("ts", datetime(2300, 1, 1), "not a timestamp from 1900-01-01"),
        ("ref", "not-a-uuid", "is not UUID text"),
    ],
)
def test_a_value_clickhouse_cannot_hold_is_schema_mismatch_and_changes_nothing(
    adqm_store: AdqmStore, tmp_path: Path, column: str, value: Any, problem: str
) -> None:
    schema = unique(parse_schema(DDL))
    datamart = adqm_store.ensure(schema)
    position = [c.name for c in schema.table("orders").columns].index(column)
    good: list[Any] = [None] * len(schema.table("orders").columns)
    good[0], good[1] = 1, "eu"
    bad = list(good)
    bad[0], bad[position] = 2, value
    rows = {"orders": [DeltaRow(tuple(good), UPSERT), DeltaRow(tuple(bad), UPSERT)]}
    with pytest.raises(SchemaMismatchError, match=f"row 2: {column} .*{problem}"):
        load(adqm_store, datamart, stage(tmp_path, schema, 0, rows))
    assert adqm_store.last_applied(schema.datamart) is None
    assert adqm_store.read_as_of(schema.datamart, schema.table("orders"), 0) == []


@pytest.mark.parametrize(
    "ddl",
    [
        'CREATE TABLE dm."my table" (id bigint not null, PRIMARY KEY (id));',
        'CREATE TABLE dm.t (id bigint not null, "a`b" varchar, PRIMARY KEY (id));',
        'CREATE TABLE dm.t (id bigint not null, "_x" varchar, PRIMARY KEY (id));',
    ],
)
def test_a_name_that_is_not_a_prostore_name_is_refused(adqm_store: AdqmStore, ddl: str) -> None:
    schema = unique(parse_schema(ddl))
    with pytest.raises(UnsupportedSchemaError, match="not a Prostore name"):
        adqm_store.ensure(schema)
    assert schema.datamart not in adqm_store.datamarts()


def test_the_views_read_as_of_a_delta_and_as_of_the_last_registered(
    adqm_store: AdqmStore, tmp_path: Path
) -> None:
    schema = unique(parse_schema(DDL))
    datamart = adqm_store.ensure(schema)
    items = schema.table("items")
    names = Names()
    current = f"SELECT sku, title FROM {names.current_view(schema.datamart, 'items')} ORDER BY sku"
    assert adqm_store.client.query(current).result_rows == []  # nothing registered yet
    load(adqm_store, datamart, stage(tmp_path, schema, 0, {"items": [DeltaRow((1, "a"), UPSERT)]}))
    later = {"items": [DeltaRow((1, "b"), UPSERT), DeltaRow((2, None), UPSERT)]}
    load(adqm_store, datamart, stage(tmp_path, schema, 1, later))
    as_of = names.as_of_view(schema.datamart, items.name)
    assert adqm_store.client.query(f"SELECT * FROM {as_of}(n = 0)").result_rows == [(1, "a")]
    assert adqm_store.client.query(current).result_rows == [(1, "b"), (2, None)]
    # a delta published but not registered shows in neither
    transfer = stage(tmp_path, schema, 2, {"items": [DeltaRow((1, None), DELETE)]})
    publish_without_registering(adqm_store, datamart, transfer, 2)
    assert adqm_store.client.query(current).result_rows == [(1, "b"), (2, None)]
    assert adqm_store.client.query(f"SELECT * FROM {as_of}(n = 1) ORDER BY sku").result_rows == [
        (1, "b"),
        (2, None),
    ]
    adqm_store.ensure(schema)


def test_the_registry_keeps_each_delta_with_its_counts_and_date(
    adqm_store: AdqmStore, tmp_path: Path
) -> None:
    schema = unique(parse_schema(DDL))
    datamart = adqm_store.ensure(schema)
    when = datetime(2026, 3, 1, 10, 30, 15, 250000, tzinfo=UTC)
    rows = {"items": [DeltaRow((1, "a"), UPSERT), DeltaRow((1, "b"), UPSERT)]}
    result = load(adqm_store, datamart, stage(tmp_path, schema, 0, rows, date=when))
    entry = adqm_store.applied(schema.datamart, 0)
    assert entry is not None
    assert entry.delta_date == when
    assert [(c.table_name, c.rows_received, c.rows_upserted) for c in entry.tables] == [
        ("orders", 0, 0),
        ("items", 2, 1),
    ]
    assert entry.request_id == result.request_id
    assert datetime.now(UTC) - entry.applied_at < timedelta(minutes=5)
    registry = adqm_store.names.meta_table("delta_registry")
    count = adqm_store.client.query(
        f"SELECT count() FROM {registry} WHERE datamart = {literal(schema.datamart)}"
    ).result_rows
    assert count == [(1,)]
