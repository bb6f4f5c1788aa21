"""Streams applied in pieces while they still arrive (`replica_store.pieces`), on a real
SparkSession and PostgreSQL, staged by Spark and in the driver: whatever the pieces, the
delta ends as if each stream had been applied whole (the model), counts included, and a
refusal or a rollback after pieces leaves nothing of it."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import psycopg
import pytest

from protocol.apply_model import DELETE, UPSERT, DeltaRow, ReplicaModel, apply_delta
from protocol.chunk_range import ChunkRange
from protocol.ddl import parse_schema
from protocol.errors import ErrorCode, ProtocolError
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_store.open_apply import OpenApply
from replica_store.transfer import StagedTransfer, StreamManifest
from spark_loader.prestage import Prestager
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, snapshot, stage

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("spark_where", ["local", "driver"], indirect=True),
]

Rows = dict[str, list[DeltaRow]]


@pytest.fixture
def schema() -> LogicalSchema:
    return unique(parse_schema(DDL))


def pieces(transfer: StagedTransfer, spans: dict[str, tuple[int, int]]) -> StagedTransfer:
    """The hand-over of chunks first..last of these tables' streams, as the agent offers
    them while the streams still arrive (a span ending at a stream's last chunk: its
    tail)."""
    streams: list[StreamManifest] = []
    for stream in transfer.manifest.streams:
        if stream.table_name in spans:
            first, last = spans[stream.table_name]
            last = min(last, stream.chunk_count)
            if first <= last:
                chunks = ChunkRange(first, last, last == stream.chunk_count)
                streams.append(
                    StreamManifest.of(stream.stream_number, stream.table_name, chunks, None)
                )
    manifest = transfer.manifest.model_copy(update={"streams": tuple(streams)})
    return StagedTransfer(transfer.directory, manifest)


def with_every_transition(before: Rows, delta: Rows, schema: LogicalSchema) -> Rows:
    """`delta` with rows added at its end (later chunks, later pieces) for keys it deletes
    that `before` had: some upserted again (closed by a delete in one piece, by an upsert
    in the whole delta), some deleted again. The workload already upserts keys twice and
    deletes keys it upserted."""
    out: Rows = {}
    for table in schema:
        key_of = [table.columns.index(table.column(k)) for k in table.primary_key]
        earlier = {tuple(r.values[i] for i in key_of): r for r in before[table.name]}
        rows = list(delta[table.name])
        deleted = [
            r for r in rows if r.sys_op == DELETE and tuple(r.values[i] for i in key_of) in earlier
        ]
        for n, row in enumerate(deleted):
            key = tuple(row.values[i] for i in key_of)
            again = DeltaRow(earlier[key].values, UPSERT) if n % 2 == 0 else row
            rows.append(again)
        out[table.name] = rows
    return out


def workload_deltas(schema: LogicalSchema, seed: int, count: int) -> list[Rows]:
    spec = WorkloadSpec(
        rows_per_delta=450, insert_ratio=0.4, update_ratio=0.4, delete_ratio=0.2, seed=seed
    )
    workload = Workload(schema, spec)
    deltas = [workload.next_delta() for _ in range(count)]
    return [deltas[0]] + [
        with_every_transition(deltas[n - 1], deltas[n], schema) for n in range(1, count)
    ]


def prestage_in_pieces(
    prestager: Prestager, transfer: StagedTransfer, cuts: Sequence[int]
) -> OpenApply | None:
    """Every stream handed over in the same pieces, interleaved: chunks up to each cut."""
    opened, done = None, 0
    for cut in cuts:
        spans = {s.table_name: (done + 1, cut) for s in transfer.manifest.streams}
        names, opened = prestager.prestage(pieces(transfer, spans), opened)
        assert names, "a piece was not prestaged"
        done = cut
    return opened


def test_streams_applied_in_interleaved_pieces_equal_the_model_counts_included(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    deltas = workload_deltas(schema, seed=21, count=3)
    loader = new_loader(schema)
    prestager = Prestager(loader)
    model = ReplicaModel(schema)
    cuts_by_delta = [(2,), (1, 3, 4), (2, 5)]
    for n, (rows, cuts) in enumerate(zip(deltas, cuts_by_delta, strict=True)):
        transfer = stage(staging_root, schema, n, rows, chunk_rows=20)
        assert min(s.chunk_count for s in transfer.manifest.streams) > max(cuts)
        opened = prestage_in_pieces(prestager, transfer, cuts)
        assert opened is not None
        opened.settle()
        assert set(opened.through().values()) == {cuts[-1]}
        result = loader.load(transfer, opened)
        model, counts = apply_delta(model, n, delta_date(n), rows)
        assert_matches_model(replica_dsn, model)
        assert sorted(result.tables, key=lambda c: c.table_name) == sorted(
            counts, key=lambda c: c.table_name
        ), f"delta {n}: counts differ"


def test_pieces_in_any_order_of_streams_and_sizes_equal_the_model(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """Streams cut at random places, handed over in random order, some whole, some with
    their tail, some left to the load; a piece handed over twice or out of turn (the open
    apply starts after what it applied, whatever the hand-over says)."""
    deltas = workload_deltas(schema, seed=22, count=2)
    loader = new_loader(schema)
    prestager = Prestager(loader)
    model = ReplicaModel(schema)
    rng = random.Random(5)  # a test's reproducible shuffle
    for n, rows in enumerate(deltas):
        transfer = stage(staging_root, schema, n, rows, chunk_rows=15)
        hand_overs: list[dict[str, tuple[int, int]]] = []
        for stream in transfer.manifest.streams:
            cuts = sorted(rng.sample(range(1, stream.chunk_count + 1), 3))
            starts = [1, *(c + 1 for c in cuts[:-1])]
            hand_overs += [{stream.table_name: (a, b)} for a, b in zip(starts, cuts, strict=True)]
        rng.shuffle(hand_overs)  # a later piece before an earlier one: it takes both
        opened = None
        for spans in hand_overs:
            _, opened = prestager.prestage(pieces(transfer, spans), opened)
        result = loader.load(transfer, opened)
        model, counts = apply_delta(model, n, delta_date(n), rows)
        assert_matches_model(replica_dsn, model)
        assert set(result.tables) == set(counts)


def test_a_bad_chunk_after_pieces_were_applied_leaves_the_replica_as_it_was(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    first, second = workload_deltas(schema, seed=23, count=2)
    loader = new_loader(schema)
    loader.load(stage(staging_root, schema, 0, first, chunk_rows=20))
    transfer = stage(staging_root, schema, 1, second, chunk_rows=20)
    before = snapshot(replica_dsn, schema)
    opened = prestage_in_pieces(Prestager(loader), transfer, (2, 4))
    stream = transfer.manifest.streams[-1]
    transfer.chunk_path(stream.stream_number, stream.chunk_count).write_bytes(b"not avro")
    with pytest.raises(ProtocolError) as refused:
        loader.load(transfer, opened)
    assert refused.value.code is ErrorCode.BAD_CHUNK
    assert snapshot(replica_dsn, schema) == before


def test_pieces_rolled_back_are_loaded_anew_from_the_chunk_files(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """The open apply is gone (the database restarted, a refusal, a timeout): nothing of
    its pieces stays, and the load stages every stream whole."""
    first, second = workload_deltas(schema, seed=24, count=2)
    loader = new_loader(schema)
    loader.load(stage(staging_root, schema, 0, first, chunk_rows=20))
    transfer = stage(staging_root, schema, 1, second, chunk_rows=20)
    before = snapshot(replica_dsn, schema)
    opened = prestage_in_pieces(Prestager(loader), transfer, (3,))
    assert opened is not None
    opened.abort()
    assert snapshot(replica_dsn, schema) == before
    loader.load(transfer, opened)
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), first)
    model, _ = apply_delta(model, 1, delta_date(1), second)
    assert_matches_model(replica_dsn, model)


def test_a_lost_connection_after_pieces_is_loaded_anew(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """The database restarted, or killed the transaction holding the pieces: the load
    starts over from the chunk files."""
    first, second = workload_deltas(schema, seed=25, count=2)
    loader = new_loader(schema)
    loader.load(stage(staging_root, schema, 0, first, chunk_rows=20))
    transfer = stage(staging_root, schema, 1, second, chunk_rows=20)
    opened = prestage_in_pieces(Prestager(loader), transfer, (2, 3))
    assert opened is not None
    opened.settle()
    assert opened.backend is not None
    with psycopg.connect(replica_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (opened.backend[0],))
    loader.load(transfer, opened)
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), first)
    model, _ = apply_delta(model, 1, delta_date(1), second)
    assert_matches_model(replica_dsn, model)
