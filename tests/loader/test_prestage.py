"""Streams staged, and applied in the delta's open transaction, while their transfer still
arrives (`spark_loader.prestage`, `replica_store.open_apply`), on a real SparkSession and
PostgreSQL, staged by Spark and in the driver: the load finishes that transaction (or
applies prestaged tables without staging them again), and nothing of it is visible before
its commit or survives a refusal, a rollback or a lost connection."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from protocol.apply_model import DeltaRow, ReplicaModel, apply_delta
from protocol.ddl import parse_schema
from protocol.errors import ErrorCode, ProtocolError
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_store.store_sql import META_SCHEMA, datamart_lock_key, physical, q
from replica_store.transfer import StagedTransfer, StreamManifest
from spark_loader.loader import DeltaLoader
from spark_loader.prestage import Prestager
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import assert_matches_model, delta_date, snapshot, stage

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("spark_where", ["local", "driver"], indirect=True),
]


@pytest.fixture
def schema() -> LogicalSchema:
    return unique(parse_schema(DDL))


def with_streams(transfer: StagedTransfer, streams: tuple[StreamManifest, ...]) -> StagedTransfer:
    """The transfer as it is while only `streams` are complete."""
    manifest = transfer.manifest.model_copy(update={"streams": streams})
    return StagedTransfer(transfer.directory, manifest)


def streams_of(transfer: StagedTransfer, count: int) -> StagedTransfer:
    """The transfer as it is while only its first `count` streams are complete."""
    return with_streams(transfer, transfer.manifest.streams[:count])


def markers(dsn: str, datamart: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            f"SELECT table_name, request_id FROM {q(META_SCHEMA)}.staged_stream "
            "WHERE datamart = %s",
            (datamart,),
        ).fetchall()
    return {str(t): str(r) for t, r in rows}


def first_stream_staged(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str, seed: int
) -> tuple[DeltaLoader, StagedTransfer, dict[str, list[DeltaRow]], str]:
    """A delta of 300 rows whose first stream alone is prestaged (staged only, its marker
    written): the loader, the transfer, its rows and that stream's table."""
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=seed)).next_delta()
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=60)
    loader = new_loader(schema)
    first = transfer.manifest.streams[0]
    names, opened = Prestager(loader).prestage(streams_of(transfer, 1))
    assert names == [first.table_name]
    assert opened is not None
    opened.abort()  # its apply rolled back: staged only
    assert markers(replica_dsn, schema.datamart) == {first.table_name: transfer.manifest.request_id}
    return loader, transfer, rows, first.table_name


def load_and_check(
    loader: DeltaLoader,
    transfer: StagedTransfer,
    schema: LogicalSchema,
    replica_dsn: str,
    rows: dict[str, list[DeltaRow]],
) -> None:
    result = loader.load(transfer)
    assert_applied(replica_dsn, schema, rows)
    assert sum(c.rows_received for c in result.tables) == sum(len(r) for r in rows.values())


def test_a_prestaged_table_is_applied_without_staging_it_again(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    loader, transfer, rows, first = first_stream_staged(
        new_loader, schema, staging_root, replica_dsn, seed=7
    )
    for _, path in transfer.chunks_of(first):
        path.unlink()  # the load must not need them: their rows are staged
    load_and_check(loader, transfer, schema, replica_dsn, rows)


def test_tables_applied_while_the_delta_arrives_are_invisible_until_the_load_commits(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=6)).next_delta()
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=60)
    loader = new_loader(schema)
    prestager = Prestager(loader)
    before = snapshot(replica_dsn, schema)
    names, opened = prestager.prestage(streams_of(transfer, 1))
    names2, again = prestager.prestage(
        with_streams(transfer, transfer.manifest.streams[1:2]), opened
    )
    assert opened is not None
    assert again is opened
    opened.settle()  # each prestage's apply runs on while the next stages
    assert set(opened.applied) == {*names, *names2}
    assert snapshot(replica_dsn, schema) == before  # nothing visible yet
    assert not lock_free(replica_dsn, schema.datamart)  # the open apply holds the datamart

    result = loader.load(transfer, opened)
    assert_applied(replica_dsn, schema, rows)
    assert sum(c.rows_received for c in result.tables) == sum(len(r) for r in rows.values())
    assert lock_free(replica_dsn, schema.datamart)


def test_an_aborted_apply_leaves_nothing_and_another_transfer_of_the_delta_loads(
    new_loader: NewLoader,
    schema: LogicalSchema,
    staging_root: Path,
    replica_dsn: str,
    spark_where: str,
) -> None:
    workload = Workload(schema, WorkloadSpec(rows_per_delta=200, seed=8))
    abandoned = stage(staging_root, schema, 0, workload.next_delta(), chunk_rows=50)
    loader = new_loader(schema)
    names, opened = Prestager(loader).prestage(abandoned)  # every stream of it
    assert names
    assert opened is not None
    before_abort = markers(replica_dsn, schema.datamart)
    opened.abort()
    assert lock_free(replica_dsn, schema.datamart)
    rows = Workload(schema, WorkloadSpec(rows_per_delta=200, seed=9)).next_delta()

    loader.load(stage(staging_root, schema, 0, rows, chunk_rows=50))
    assert_applied(replica_dsn, schema, rows)
    assert set(before_abort) == set(names)
    # Staging written again (by Spark) forgets its markers; a delta staged in its own apply
    # transaction (in the driver) leaves staging, and the markers that are still true, alone.
    left = markers(replica_dsn, schema.datamart)
    assert set(left.values()) <= {abandoned.manifest.request_id}
    assert (left == {}) is (spark_where == "local")


def test_a_bad_chunk_after_tables_applied_in_the_open_transaction_changes_nothing(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    rows = Workload(schema, WorkloadSpec(rows_per_delta=200, seed=10)).next_delta()
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=50)
    last = transfer.manifest.streams[-1]
    transfer.chunks_of(last.table_name)[-1][1].write_bytes(b"not an avro container")
    loader = new_loader(schema)
    before = snapshot(replica_dsn, schema)
    names, opened = Prestager(loader).prestage(streams_of(transfer, 1))
    assert names
    assert opened is not None

    with pytest.raises(ProtocolError) as refused:
        loader.load(transfer, opened)
    assert refused.value.code is ErrorCode.BAD_CHUNK
    assert snapshot(replica_dsn, schema) == before
    assert lock_free(replica_dsn, schema.datamart)
    bad_first = Prestager(loader).prestage(with_streams(transfer, (last,)))
    assert bad_first == ([], None)  # refused while staging: nothing opened


def test_nothing_is_prestaged_out_of_sequence_or_while_a_load_holds_the_datamart(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    workload = Workload(schema, WorkloadSpec(rows_per_delta=100, seed=11))
    zero, one = workload.next_delta(), workload.next_delta()
    loader = new_loader(schema)
    prestager = Prestager(loader)
    assert prestager.prestage(stage(staging_root, schema, 1, one)) == ([], None)  # 0 first
    transfer = stage(staging_root, schema, 0, zero)
    with psycopg.connect(replica_dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (datamart_lock_key(schema.datamart),))
        assert prestager.prestage(transfer) == ([], None)
    assert markers(replica_dsn, schema.datamart) == {}
    names, opened = prestager.prestage(transfer)
    assert names == [s.table_name for s in transfer.manifest.streams]
    assert opened is not None
    loader.load(transfer, opened)
    assert_applied(replica_dsn, schema, zero)


def test_streams_prestaged_in_any_order_then_loaded_equal_the_model(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """The origin may send its streams in any order: the last first, then the first two."""
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=12)).next_delta()
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=45)
    streams = transfer.manifest.streams
    assert len(streams) >= 3
    loader = new_loader(schema)
    prestager = Prestager(loader)
    opened = None
    for part in ((streams[-1],), streams[:2]):
        names, opened = prestager.prestage(with_streams(transfer, part), opened)
        assert names == [s.table_name for s in part]
    loader.load(transfer, opened)
    assert_applied(replica_dsn, schema, rows)


def test_a_lost_connection_of_the_open_apply_is_loaded_anew(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """The database restarted, or killed the idle transaction: the load starts over."""
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=13)).next_delta()
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=60)
    loader = new_loader(schema)
    names, opened = Prestager(loader).prestage(streams_of(transfer, 2))
    assert names
    assert opened is not None
    assert opened.backend is not None
    with psycopg.connect(replica_dsn, autocommit=True) as admin:
        pid = opened.backend[0]
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

    loader.load(transfer, opened)
    assert_applied(replica_dsn, schema, rows)
    assert lock_free(replica_dsn, schema.datamart)


def test_the_load_stages_the_tables_left_while_the_last_prestage_still_applies(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """A prestage returns once its tables are staged; their apply runs on in the open
    transaction (here held up by a lock on the table), the next prestage or the load stages
    meanwhile, and the load waits for that apply only to apply what it staged."""
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=14)).next_delta()
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=60)
    loader = new_loader(schema)
    datamart = loader.datamart(schema.datamart)
    assert datamart is not None
    first, last = transfer.manifest.streams[0].table_name, transfer.manifest.streams[-1].table_name
    with psycopg.connect(replica_dsn) as blocker, ThreadPoolExecutor(2) as pool:
        blocker.execute(f"LOCK TABLE {physical(schema.datamart, first, 'actual')}")
        try:  # the lock goes before the pool waits for its threads, whatever fails
            prestaged = pool.submit(Prestager(loader).prestage, streams_of(transfer, 1))
            names, opened = prestaged.result(timeout=60)  # its apply waits for the lock
            assert names == [first]
            assert opened is not None
            assert opened.applying()  # held by the lock
            loading = pool.submit(loader.load, transfer, opened)
            deadline = time.monotonic() + 60
            with psycopg.connect(replica_dsn, autocommit=True) as probe:
                staging = datamart.staging(last)
                while not probe.execute(f"SELECT count(*) FROM {staging}").fetchone()[0]:  # type: ignore[index]
                    assert time.monotonic() < deadline, "the load staged nothing meanwhile"
                    time.sleep(0.05)
            assert not loading.done()  # the first table's apply still waits
        finally:
            blocker.rollback()
        loading.result(timeout=120)
    assert not opened.applying()
    assert_applied(replica_dsn, schema, rows)


def assert_applied(dsn: str, schema: LogicalSchema, rows: dict) -> None:  # type: ignore[type-arg]
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
    assert_matches_model(dsn, model)


def lock_free(dsn: str, datamart: str) -> bool:
    """Whether the datamart's load lock is free (taken and given back at once)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_try_advisory_lock(%s)", (datamart_lock_key(datamart),)
        ).fetchone()
        return bool(row and row[0])


def test_an_open_apply_left_idle_is_ended_by_the_server_and_the_delta_still_loads(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """An agent stopped (SIGSTOP, a starved host) between pieces held the datamart's lock and
    pinned the VACUUM horizon for as long as it stayed stopped: nothing on the server ended
    the transaction. Now PostgreSQL ends it after `idle_seconds`."""
    rows = Workload(schema, WorkloadSpec(rows_per_delta=200, seed=12)).next_delta()
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=50)
    loader = new_loader(schema)
    before = snapshot(replica_dsn, schema)
    names, opened = Prestager(loader, idle_seconds=1.0).prestage(streams_of(transfer, 1))
    assert names
    assert opened is not None
    opened.settle()
    assert not lock_free(replica_dsn, schema.datamart)
    deadline = time.monotonic() + 30
    while not lock_free(replica_dsn, schema.datamart):  # the agent does nothing meanwhile
        assert time.monotonic() < deadline, "the idle transaction was never ended"
        time.sleep(0.2)
    assert snapshot(replica_dsn, schema) == before

    loader.load(transfer, opened)  # the apply it was given is gone: loaded anew
    assert_applied(replica_dsn, schema, rows)
    with psycopg.connect(replica_dsn) as conn:  # the kept sessions carry no idle limit
        row = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
    assert row == ("0",)


def test_the_load_that_takes_an_open_apply_over_is_not_ended_while_it_works(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=13)).next_delta()
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=60)
    loader = new_loader(schema)
    _, opened = Prestager(loader, idle_seconds=30.0).prestage(streams_of(transfer, 1))
    assert opened is not None
    loader.load(transfer, opened)
    assert_applied(replica_dsn, schema, rows)
    for session in loader.connections._idle:
        row = session.conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        assert row == ("0",)  # reset when given back


def test_a_staging_table_emptied_by_a_crash_is_staged_again_not_believed(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    """PostgreSQL's crash recovery empties unlogged staging tables; the staged_stream row
    that says a stream is staged there survives it. The load believed it, applied nothing
    for the table and failed its staged-rows check (LOAD_FAILED, a round trip)."""
    loader, transfer, rows, first = first_stream_staged(
        new_loader, schema, staging_root, replica_dsn, seed=14
    )
    datamart = loader.datamart(schema.datamart)
    assert datamart is not None
    with psycopg.connect(replica_dsn, autocommit=True) as conn:  # as crash recovery does
        conn.execute(f"TRUNCATE {datamart.staging(first)}")
    load_and_check(loader, transfer, schema, replica_dsn, rows)
