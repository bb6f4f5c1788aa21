"""The seeded workload and the framing of deltas into `delta.in` messages."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest

from protocol.apply_model import DELETE, ReplicaModel, apply_delta
from protocol.codec import decode_delta_in_key, encode_delta_in_key
from protocol.ddl import parse_schema
from protocol.framing import frame_delta
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from tests.protocol.tables import ALL_TYPES_DDL, decode_body_table


def test_the_same_seed_gives_the_same_deltas(marketing: LogicalSchema) -> None:
    spec = WorkloadSpec(rows_per_delta=300, seed=42)
    first, second = Workload(marketing, spec), Workload(marketing, spec)
    for _ in range(5):
        assert first.next_delta() == second.next_delta()
    other = Workload(marketing, WorkloadSpec(rows_per_delta=300, seed=43))
    assert other.next_delta() != Workload(marketing, spec).next_delta()


def test_the_mix_of_changes_follows_the_spec(marketing: LogicalSchema) -> None:
    workload = Workload(marketing, WorkloadSpec(rows_per_delta=3000, seed=1))
    workload.next_delta()  # delta 0 creates the keys later deltas change
    rows = [r for rows in workload.next_delta().values() for r in rows]
    assert len(rows) == 3000
    deletes = sum(r.sys_op == DELETE for r in rows) / len(rows)
    assert 0.07 < deletes < 0.13


def test_every_type_is_generated_within_its_column() -> None:
    schema = parse_schema(ALL_TYPES_DDL)
    workload = Workload(schema, WorkloadSpec(rows_per_delta=500, null_ratio=0.2, seed=3))
    table = schema.table("all_types")
    for _ in range(3):
        rows = workload.next_delta()["all_types"]
        # the generated rows are valid bodies: encoding and decoding them passes every check
        frames = list(
            frame_delta(
                schema,
                request_id="r",
                delta_num=0,
                delta_date=datetime(2024, 1, 1),
                rows_by_table={"all_types": rows},
            )
        )
        decoded = sum(decode_body_table(table, f.body).num_rows for f in frames)
        assert decoded == len(rows)
    assert WorkloadSpec().rows_per_delta == 1000
    with pytest.raises(ValueError, match="add up to 1"):
        WorkloadSpec(insert_ratio=0.9)


def test_framing_follows_the_chunk_rules(marketing: LogicalSchema) -> None:
    workload = Workload(marketing, WorkloadSpec(rows_per_delta=25, seed=5))
    rows = workload.next_delta()
    rows["stores"] = []  # a table without changes
    chunks = list(
        frame_delta(
            marketing,
            request_id="req-1",
            delta_num=0,
            delta_date=datetime(2024, 1, 1, tzinfo=UTC),
            rows_by_table=rows,
            chunk_rows=4,
        )
    )
    keys = [decode_delta_in_key(encode_delta_in_key(c.key)) for c in chunks]
    assert {k.stream_total for k in keys} == {3}
    assert {k.stream_number: k.table_name for k in keys} == {
        1: "sales",
        2: "stores",
        3: "agreements",
    }
    per_stream = Counter(k.stream_number for k in keys)
    assert per_stream[2] == 1  # the empty stream: one empty chunk, flagged last
    for stream, count in per_stream.items():
        numbers = [k.chunk_number for k in keys if k.stream_number == stream]
        assert numbers == list(range(1, count + 1))
        last = [k.chunk_number for k in keys if k.stream_number == stream and k.is_last_chunk]
        assert last == [count]
    empty = next(c for c in chunks if c.key.table_name == "stores")
    assert decode_body_table(marketing.table("stores"), empty.body).num_rows == 0
    # and the rows survive the wire, in order
    sales = [
        tuple(r.values())
        for c in chunks
        if c.key.table_name == "sales"
        for r in decode_body_table(marketing.table("sales"), c.body).to_pylist()
    ]
    assert sales == [(*r.values, r.sys_op) for r in rows["sales"]]


def test_workload_deltas_apply_to_the_reference_model(marketing: LogicalSchema) -> None:
    workload = Workload(marketing, WorkloadSpec(rows_per_delta=600, seed=9))
    replica = ReplicaModel(marketing)
    for n in range(4):
        replica, counts = apply_delta(replica, n, datetime(2024, 1, 1), workload.next_delta())
        assert sum(c.rows_received for c in counts) == 600
    # the generator's own idea of the live keys is the replica's
    for table in marketing:
        assert set(replica.tables[table.name].actual) == set(workload._state[table.name].live)
