"""Failures leave the replica as it was; loads are idempotent and strictly in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from protocol.apply_model import DeltaRow, ReplicaModel, apply_delta
from protocol.ddl import parse_schema
from protocol.errors import ErrorCode, ProtocolError, SchemaMismatchError
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_store.errors import LoadFailedError
from replica_store.store import ReplicaStore
from spark_loader import loader as loader_module
from spark_loader import slice_jobs
from tests.loader.conftest import NewLoader, unique
from tests.loader.staging_helpers import (
    assert_matches_model,
    delta_date,
    snapshot,
    stage,
    two_deltas,
)

pytestmark = pytest.mark.slow

#: Every test here that uses Spark runs in local mode and on the standalone cluster.
RUN_ON_CLUSTER = True

DDL = (Path(__file__).resolve().parents[2] / "examples" / "marketing.sql").read_text()


@pytest.fixture
def schema() -> LogicalSchema:
    return unique(parse_schema(DDL))


class Boom(RuntimeError):
    pass


def test_an_error_between_tables_changes_nothing(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    model, (first, second) = two_deltas(schema, staging_root)
    new_loader(schema).load(first)
    before = snapshot(replica_dsn, schema)

    def explode(conn: psycopg.Connection, table: str) -> None:
        if table == "stores":  # sales already applied inside the transaction
            raise Boom("injected between tables")

    with pytest.raises(Boom):
        new_loader(schema, between_tables=explode).load(second)
    assert snapshot(replica_dsn, schema) == before
    store = ReplicaStore(replica_dsn)
    assert [e.delta_num for e in store.registry(schema.datamart)] == [0]
    # applying again succeeds, once
    result = new_loader(schema).load(second)
    assert not result.already_applied
    assert_matches_model(replica_dsn, model)
    assert new_loader(schema).load(second).already_applied
    assert [e.delta_num for e in store.registry(schema.datamart)] == [0, 1]


def _killer(dsn: str, times: int) -> tuple[list[int], object]:
    killed: list[int] = []

    def kill_own_backend(conn: psycopg.Connection, table: str) -> None:
        if table == "stores" and len(killed) < times:
            pid = conn.info.backend_pid
            killed.append(pid)
            with psycopg.connect(dsn, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (pid,))

    return killed, kill_own_backend


def test_a_killed_backend_mid_apply_is_load_failed_and_changes_nothing(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    model, (first, second) = two_deltas(schema, staging_root)
    new_loader(schema).load(first)
    before = snapshot(replica_dsn, schema)
    killed, hook = _killer(replica_dsn, times=1)
    with pytest.raises(LoadFailedError) as caught:
        new_loader(schema, attempts=1, between_tables=hook).load(second)
    assert caught.value.code is ErrorCode.LOAD_FAILED
    assert len(killed) == 1
    assert snapshot(replica_dsn, schema) == before
    new_loader(schema).load(second)
    assert_matches_model(replica_dsn, model)


def test_a_killed_backend_is_retried_and_the_delta_applies_once(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    model, (first, second) = two_deltas(schema, staging_root)
    new_loader(schema).load(first)
    killed, hook = _killer(replica_dsn, times=1)
    result = new_loader(schema, attempts=3, between_tables=hook).load(second)
    assert len(killed) == 1
    assert not result.already_applied
    assert_matches_model(replica_dsn, model)
    registry = ReplicaStore(replica_dsn).registry(schema.datamart)
    assert [(e.delta_num, e.request_id) for e in registry] == [
        (0, first.manifest.request_id),
        (1, second.manifest.request_id),
    ]


def test_applying_the_same_delta_twice_changes_nothing_the_second_time(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    _, (first, _second) = two_deltas(schema, staging_root)
    loader = new_loader(schema)
    applied = loader.load(first)
    before = snapshot(replica_dsn, schema)
    again = loader.load(first)
    assert again.already_applied
    assert (again.tables, again.applied_at, again.request_id) == (
        applied.tables,
        applied.applied_at,
        applied.request_id,
    )
    assert snapshot(replica_dsn, schema) == before
    # a resend under another requestId is the same delta: the stored result comes back
    resent = stage(staging_root, schema, 0, {"sales": []})
    assert loader.load(resent).request_id == first.manifest.request_id


def test_deltas_apply_strictly_in_order(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    _, (first, second) = two_deltas(schema, staging_root)
    loader = new_loader(schema)
    with pytest.raises(ProtocolError) as caught:
        loader.load(second)
    assert caught.value.code is ErrorCode.OUT_OF_SEQUENCE
    loader.load(first)
    other_date = stage(staging_root, schema, 0, {}, date=delta_date(0) + timedelta(seconds=1))
    with pytest.raises(ProtocolError) as caught:
        loader.load(other_date)
    assert caught.value.code is ErrorCode.DELTA_CONFLICT
    not_later = stage(staging_root, schema, 1, {}, date=delta_date(0))
    with pytest.raises(ProtocolError) as caught:
        loader.load(not_later)
    assert caught.value.code is ErrorCode.DELTA_CONFLICT
    assert [e.delta_num for e in ReplicaStore(replica_dsn).registry(schema.datamart)] == [0]


def test_a_row_error_in_the_executors_is_schema_mismatch_and_changes_nothing(
    new_loader: NewLoader, schema: LogicalSchema, staging_root: Path, replica_dsn: str
) -> None:
    _, (first, _second) = two_deltas(schema, staging_root)
    loader = new_loader(schema)
    loader.load(first)
    before = snapshot(replica_dsn, schema)
    good = DeltaRow((1, None, None, None, None), 0)
    bad = DeltaRow((2, None, None, None, None), 2)  # sys_op 2
    transfer = stage(staging_root, schema, 1, {"stores": [good, good, bad]}, chunk_rows=2)
    with pytest.raises(SchemaMismatchError, match="row 1: sys_op is 2"):
        loader.load(transfer)
    assert snapshot(replica_dsn, schema) == before
    assert [e.delta_num for e in ReplicaStore(replica_dsn).registry(schema.datamart)] == [0]


def test_no_password_reaches_the_executors(
    new_loader: NewLoader,
    schema: LogicalSchema,
    staging_root: Path,
    replica_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    spark_where: str,
) -> None:
    if spark_where == "driver":
        pytest.skip("staging in the driver ships no closure")
    password = conninfo_to_dict(replica_dsn).get("password")
    if not password:
        pytest.skip("the replica's DSN has no password (the embedded one has)")
    _, (first, _) = two_deltas(schema, staging_root)
    shipped: list[str] = []
    real = slice_jobs.stage_slices

    def recording(*args: object) -> object:
        shipped.append(repr(args))
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr("spark_loader.staging_steps.stage_slices", recording)
    new_loader(schema).load(first)
    assert shipped  # a Spark job or more
    for closure in shipped:
        assert str(password) not in closure
        assert "passfile=" in closure


def test_a_task_retried_after_its_copy_leaves_exactly_one_copy_of_its_rows(
    new_loader: NewLoader,
    schema: LogicalSchema,
    staging_root: Path,
    replica_dsn: str,
    spark_where: str,
) -> None:
    if spark_where == "driver":
        pytest.skip("the driver runs no Spark task: nothing is retried")
    # Every staging task commits its COPY, then its first attempt fails: Spark runs it again.
    model, transfers = two_deltas(schema, staging_root)
    for transfer in transfers:
        result = new_loader(schema, fail_first_attempt=True, max_slice_mib=0.01).load(transfer)
        assert not result.already_applied
    assert_matches_model(replica_dsn, model)  # a second copy would have doubled versions
    registry = ReplicaStore(replica_dsn).registry(schema.datamart)
    assert [e.delta_num for e in registry] == [0, 1]


def _after_first_table_staged(
    monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], None]
) -> None:
    """Run `meanwhile` once, when the load's first table is staged (committed) and the
    apply transaction has not read it yet: the window a second process used to empty it."""
    real = loader_module.run_ahead  # type: ignore[attr-defined]
    calls: list[int] = []

    @contextmanager
    def run_ahead(steps: Any, name: str) -> Iterator[Iterator[tuple[int, int]]]:
        with real(steps, name) as staged:

            def handed_over() -> Iterator[tuple[int, int]]:
                first = next(staged)
                if not calls:
                    calls.append(1)
                    meanwhile()
                yield first
                yield from staged

            yield handed_over()

    monkeypatch.setattr(loader_module, "run_ahead", run_ahead)


def test_a_second_process_registering_the_datamart_mid_load_waits_for_it(
    new_loader: NewLoader,
    schema: LogicalSchema,
    staging_root: Path,
    replica_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rolling deploy's second agent (or `podd-loader`, `podd-restore`) registers the
    datamart while the first one loads: it used to drop and recreate the staging tables
    under the load, which then applied empty tables and was answered OK."""
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=3)).next_delta()
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=70)
    loader = new_loader(schema)
    registered = threading.Event()

    def register() -> None:
        ReplicaStore(replica_dsn).ensure(schema)
        registered.set()

    other = threading.Thread(target=register)

    def register_meanwhile() -> None:
        other.start()
        assert not registered.wait(2.0), "a schema change went ahead during a load"

    _after_first_table_staged(monkeypatch, register_meanwhile)
    result = loader.load(transfer)
    other.join(60)
    assert registered.is_set()  # once the load let go of the datamart
    assert not result.already_applied
    assert_matches_model(replica_dsn, model)


def test_a_staging_table_emptied_under_the_load_is_staged_again_not_applied_empty(
    new_loader: NewLoader,
    schema: LogicalSchema,
    staging_root: Path,
    replica_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever empties staging without the datamart's lock (an older version, a person),
    the count check sees it: the attempt is rolled back and the next one stages again."""
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=4)).next_delta()
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=70)
    loader = new_loader(schema, attempts=2)
    staging = loader._datamarts[schema.datamart].staging(schema.tables[0].name)

    def truncate() -> None:
        with psycopg.connect(replica_dsn, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {staging}")

    _after_first_table_staged(monkeypatch, truncate)
    result = loader.load(transfer)
    assert not result.already_applied
    assert_matches_model(replica_dsn, model)
    assert [e.delta_num for e in ReplicaStore(replica_dsn).registry(schema.datamart)] == [0]


def test_a_hung_staging_job_is_cancelled_at_its_deadline_and_nothing_is_applied(
    new_loader: NewLoader,
    schema: LogicalSchema,
    staging_root: Path,
    replica_dsn: str,
    spark_where: str,
) -> None:
    """A staging task that never ends (here: waiting on a lock another session holds) used
    to stall the load, and the agent, for ever while `/health` said 200."""
    if spark_where == "driver":
        pytest.skip("the driver runs no Spark job: its statement and lock timeouts bound it")
    rows = Workload(schema, WorkloadSpec(rows_per_delta=300, seed=6)).next_delta()
    model, _ = apply_delta(ReplicaModel(schema), 0, delta_date(0), rows)
    transfer = stage(staging_root, schema, 0, rows, chunk_rows=70)
    loader = new_loader(schema, attempts=1)
    loader.settings = loader.settings.model_copy(update={"spark_job_timeout_seconds": 3})
    staging = loader._datamarts[schema.datamart].staging(schema.tables[0].name)
    with psycopg.connect(replica_dsn) as blocker:
        blocker.execute(f"LOCK TABLE {staging} IN SHARE MODE")  # reads pass, writes wait
        started = time.monotonic()
        with pytest.raises(LoadFailedError, match="ran past 3 s"):
            loader.load(transfer)
        assert time.monotonic() - started < 120
        blocker.rollback()
    assert ReplicaStore(replica_dsn).registry(schema.datamart) == []
    new_loader(schema).load(transfer)
    assert_matches_model(replica_dsn, model)
