"""Every case of PROTOCOL.md's apply semantics, on real Spark and PostgreSQL, row by row
against the reference model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from protocol.apply_model import DeltaRow, ReplicaModel, TableCounts, apply_delta
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema
from spark_loader.slice_jobs import plan_tasks
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, read_as_of, stage

pytestmark = pytest.mark.slow

#: Every test here that uses Spark runs in local mode and on the standalone cluster.
RUN_ON_CLUSTER = True

DDL = """
CREATE TABLE m.items (id bigint not null, name varchar(20), qty int32, PRIMARY KEY (id));
CREATE TABLE m.links (a varchar(10) not null, b int not null, note varchar, PRIMARY KEY (a, b));
"""


@pytest.fixture
def schema() -> LogicalSchema:
    return unique(parse_schema(DDL))


def up(key: int, name: str | None = "x", qty: int | None = 1) -> DeltaRow:
    return DeltaRow((key, name, qty), 0)


def delete(key: int) -> DeltaRow:
    return DeltaRow((key, None, None), 1)


class Replay:
    """Applies deltas through the loader and the model side by side, checking both agree."""

    def __init__(self, loader_factory: NewLoader, schema: LogicalSchema, root: Path, dsn: str):
        self.loader = loader_factory(schema)
        self.schema = schema
        self.model = ReplicaModel(schema)
        self.root = root
        self.dsn = dsn

    def apply(self, chunk_rows: int = 1000, **rows: Sequence[DeltaRow]) -> tuple[TableCounts, ...]:
        n = self.model.expected_delta_num
        transfer = stage(self.root, self.schema, n, rows, chunk_rows=chunk_rows)
        result = self.loader.load(transfer)
        self.model, counts = apply_delta(self.model, n, delta_date(n), rows)
        assert list(result.tables) == counts
        assert result.delta_num == n
        assert result.delta_date == delta_date(n)
        assert_matches_model(self.dsn, self.model)
        return result.tables


@pytest.fixture
def replay(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> Replay:
    return Replay(new_loader, schema, staging_root, replica_dsn)


def test_insert(replay: Replay) -> None:
    counts = replay.apply(items=[up(1, "a"), up(2, "b")])
    assert counts[0] == TableCounts("items", 2, 2, 0)


def test_update(replay: Replay) -> None:
    replay.apply(items=[up(1, "a")])
    counts = replay.apply(items=[up(1, "b", 5)])
    assert counts[0] == TableCounts("items", 1, 1, 0)


def test_upsert_with_equal_values_makes_a_new_version(replay: Replay) -> None:
    replay.apply(items=[up(1, "a")])
    assert replay.apply(items=[up(1, "a")])[0].rows_upserted == 1


def test_delete(replay: Replay) -> None:
    replay.apply(items=[up(1, "a"), up(2, "b")])
    counts = replay.apply(items=[delete(1)])
    assert counts[0] == TableCounts("items", 1, 0, 1)


def test_delete_of_a_missing_key(replay: Replay) -> None:
    replay.apply(items=[up(1, "a")])
    counts = replay.apply(items=[delete(42)])
    assert counts[0] == TableCounts("items", 1, 0, 0)


def test_upsert_then_delete_of_one_key_in_one_delta(replay: Replay) -> None:
    replay.apply(items=[up(1, "a")])
    counts = replay.apply(items=[up(1, "b"), delete(1)])
    assert counts[0] == TableCounts("items", 2, 0, 1)


def test_delete_then_upsert_of_one_key_in_one_delta(replay: Replay) -> None:
    replay.apply(items=[up(1, "a")])
    counts = replay.apply(items=[delete(1), up(1, "c")])
    assert counts[0] == TableCounts("items", 2, 1, 0)


def test_exact_duplicate_rows_collapse(replay: Replay) -> None:
    counts = replay.apply(items=[up(1, "a")] * 5)
    assert counts[0] == TableCounts("items", 5, 1, 0)


def test_one_key_in_several_chunks_the_last_chunk_wins(replay: Replay) -> None:
    # one row per chunk: the winner is decided by chunk number across executors
    rows = [up(7, f"v{i}", i) for i in range(12)] + [up(8, "other")]
    counts = replay.apply(chunk_rows=1, items=rows)
    assert counts[0] == TableCounts("items", 13, 2, 0)
    # and by position inside one chunk
    replay.apply(chunk_rows=4, items=[up(7, "p1"), up(7, "p2"), up(7, "p3"), up(7, "p4")])


def test_an_empty_delta(replay: Replay) -> None:
    replay.apply(items=[up(1, "a")])
    counts = replay.apply()
    assert counts == (TableCounts("items", 0, 0, 0), TableCounts("links", 0, 0, 0))


def test_several_tables_in_one_delta_with_a_composite_key(replay: Replay) -> None:
    links = [DeltaRow(("k", 1, "n1"), 0), DeltaRow(("k", 2, None), 0), DeltaRow(("j", 1, "z"), 0)]
    counts = replay.apply(items=[up(1), up(2)], links=links)
    assert counts == (TableCounts("items", 2, 2, 0), TableCounts("links", 3, 3, 0))
    counts = replay.apply(items=[delete(2)], links=[DeltaRow(("k", 2, "n2"), 0)])
    assert counts == (TableCounts("items", 1, 0, 1), TableCounts("links", 1, 1, 0))


def test_reads_as_of_every_applied_delta(replay: Replay, replica_dsn: str) -> None:
    replay.apply(items=[up(1, "a"), up(2, "b")])
    replay.apply(items=[up(1, "a2"), delete(2), up(3, "c")])
    replay.apply(items=[delete(1)])
    items = replay.schema.table("items")
    for n in range(3):
        expected = {
            v.values for v in replay.model.tables["items"].actual.values() if v.sys_from <= n
        }
        expected |= {
            v.values
            for v in replay.model.tables["items"].history
            if v.sys_from <= n and v.sys_to is not None and v.sys_to >= n
        }
        assert read_as_of(replica_dsn, replay.schema.datamart, items, n) == expected
    assert read_as_of(replica_dsn, replay.schema.datamart, items, 0) == {(1, "a", 1), (2, "b", 1)}


def test_tables_cut_into_key_slices_keep_the_last_row_per_key(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """With a tiny slice size each table is staged as several key slices, in several tasks:
    every key's rows still meet in one slice, and its last row (chunk order) wins."""
    replay = Replay(new_loader, schema, staging_root, replica_dsn)
    replay.loader = new_loader(schema, max_slice_mib=0.01)
    replay.apply(items=[up(k, f"first {k}") for k in range(3000)])
    rounds = [
        [up(k, f"round {r} {k}", r) if (k + r) % 7 else delete(k) for k in range(4000)]
        for r in range(3)
    ]
    links = [DeltaRow((f"k{k % 500}", k % 3, f"n{k}"), int(k % 5 == 0)) for k in range(6000)]
    transfer_rows = [row for round_rows in rounds for row in round_rows]
    counts = replay.apply(chunk_rows=700, items=transfer_rows, links=links)
    assert counts[0].rows_received == 12000

    chunks = [
        (position, number, str(path), path.stat().st_size)
        for position, table in enumerate(schema.tables)
        for number, path in stage(
            staging_root, schema, 1, {"items": transfer_rows, "links": links}, chunk_rows=700
        ).chunks_of(table.name)
    ]
    tasks = plan_tasks(chunks, parallelism=2, max_slice_bytes=int(0.01 * 2**20))
    assert all(s.slices > 1 for task in tasks for s in task.slices)
    assert len(tasks) == 2
