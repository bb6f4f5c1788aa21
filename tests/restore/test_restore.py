"""`podd-restore` on real parts: backup topics on the test broker, the test replica, Spark.

Every test restores a datamart of its own from a topic of its own, and compares the
replica with the reference model of `protocol.apply_model`, also as of every delta.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conformance.forges import raw_batches as rb
from origin.sources import WorkloadSource, replica_model
from podd_kafka.settings import Compression
from protocol.apply_model import (
    DeltaRow,
    ReplicaModel,
    apply_delta,
    rows_as_of,
)
from protocol.backup import BackupKey
from protocol.backup_writer import BackupMessage, encode_backup_body
from protocol.codec import decode_message
from protocol.schema import LogicalSchema
from protocol.workload import WorkloadSpec
from replica_store.store import ReplicaStore
from tests.loader.staging_helpers import assert_matches_model, read_as_of
from tests.restore.conftest import (
    Restore,
    changelog_backup,
    renamed,
    with_duplicates,
    write_topic,
)
from tools.backup_topic import BackupLayout, incremental, snapshot

pytestmark = pytest.mark.slow


def _is(message: BackupMessage, *, delta: int, stream: int, last: bool) -> bool:
    key = decode_message(BackupKey, message.key)
    return (key.delta_num, key.stream_number, key.is_last_chunk) == (delta, stream, last)


def assert_as_of_every_delta(dsn: str, model: ReplicaModel, last: int) -> None:
    for n in range(last + 1):
        for table in model.schema:
            expected = rows_as_of(model.tables[table.name], n)
            assert read_as_of(dsn, model.schema.datamart, table, n) == expected, (table.name, n)


def test_an_incremental_backup_by_three_threads_with_duplicates_and_a_rerun_restores_exactly(
    restore: Restore, topic: str, marketing: LogicalSchema, replica_dsn: str
) -> None:
    schema = renamed(marketing)
    source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=80, seed=21))
    layout = BackupLayout(threads=3, partitions=3, chunk_rows=9)
    first_run = list(incremental(source, range(20), layout, "run-1"))
    rerun = list(incremental(source, range(8, 13), layout, "run-2"))  # 5 deltas again
    write_topic(restore.broker, topic, 3, with_duplicates([*first_run, *rerun], 0.15))

    checked = restore("check", "--topic", topic, "--datamart", schema.datamart, "--json")
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    assert report["restorable_to"] == 19
    rewritten = {d["delta"]: d for d in report["deltas"]}[10]
    assert {r["increment_id"] for r in rewritten["runs"]} == {"run-1", "run-2"}
    assert rewritten["uses"] == "run-2"  # the latest run of a delta is preferred
    assert sum(r["duplicates"] for d in report["deltas"] for r in d["runs"]) > 0

    # Half-way first, then the rest: the replica is right at both points.
    done = restore("run", "--topic", topic, "--datamart", schema.datamart, "--to-delta", "9")
    assert done.returncode == 0, done.stderr
    assert_matches_model(replica_dsn, replica_model(source, 9))
    done = restore("run", "--topic", topic, "--datamart", schema.datamart)
    assert done.returncode == 0, done.stderr
    assert "restored deltas 10-19" in done.stdout
    model = replica_model(source, 19)
    assert_matches_model(replica_dsn, model)
    assert_as_of_every_delta(replica_dsn, model, 19)
    registry = ReplicaStore(replica_dsn).registry(schema.datamart)
    assert [e.delta_num for e in registry] == list(range(20))
    assert [e.delta_date for e in registry] == [source.delta(n).date for n in range(20)]  # type: ignore[union-attr]
    assert registry[10].request_id.startswith("restore:run-2:")
    # Again: nothing to do, nothing changed.
    again = restore("run", "--topic", topic, "--datamart", schema.datamart)
    assert again.returncode == 0, again.stderr
    assert "nothing applied; the replica expects delta 20" in again.stdout
    assert_matches_model(replica_dsn, model)


def test_snapshots_of_depth_0_and_3_restore_the_state_renumbered(
    restore: Restore, marketing: LogicalSchema, replica_dsn: str, topic: str
) -> None:
    for depth in (0, 3):
        schema = renamed(marketing)
        source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=60, seed=depth))
        layout = BackupLayout(threads=2, partitions=2, chunk_rows=25)
        name = f"{topic}-{depth}"
        write_topic(restore.broker, name, 2, snapshot(source, 9, depth, layout, None))
        done = restore("run", "--topic", name, "--datamart", schema.datamart)
        assert done.returncode == 0, done.stderr
        # The model of the snapshot: the state after delta 9 - depth as delta 0, then the
        # later deltas renumbered from 1.
        base = replica_model(source, 9 - depth)
        model = ReplicaModel(schema)
        state = {t: [v.values for v in base.tables[t].actual.values()] for t in base.tables}
        rows0 = {t: [DeltaRow(values, 0) for values in rows] for t, rows in state.items()}
        model, _ = apply_delta(model, 0, source.delta(9 - depth).date, rows0)  # type: ignore[union-attr]
        for renumbered, n in enumerate(range(10 - depth, 10), 1):
            delta = source.delta(n)
            assert delta is not None
            model, _ = apply_delta(model, renumbered, delta.date, delta.rows_by_table)
        assert_matches_model(replica_dsn, model)
        assert_as_of_every_delta(replica_dsn, model, depth)
        # The live rows are those after delta 9 of the source.
        final = replica_model(source, 9)
        for table in schema:
            assert read_as_of(replica_dsn, schema.datamart, table, depth) == rows_as_of(
                final.tables[table.name], 9
            )
        registry = ReplicaStore(replica_dsn).registry(schema.datamart)
        assert [e.delta_num for e in registry] == list(range(depth + 1))


def test_check_names_a_missing_and_an_incomplete_increment_and_run_stops_before_the_gap(
    restore: Restore, topic: str, marketing: LogicalSchema, replica_dsn: str
) -> None:
    schema, other = renamed(marketing), renamed(marketing)
    source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=40, seed=3))
    layout = BackupLayout(threads=2, partitions=2, chunk_rows=10)
    messages = [
        m for n in range(10) if n != 4 for m in incremental(source, [n], layout, "run-a")
    ]  # no delta 4 at all
    # delta 7: stream 2's last chunk is absent
    messages = [m for m in messages if not _is(m, delta=7, stream=2, last=True)]
    other_source = WorkloadSource(other, WorkloadSpec(rows_per_delta=10, seed=4))
    messages += list(incremental(other_source, range(2), layout, "run-o"))
    write_topic(restore.broker, topic, 2, messages)

    checked = restore("check", "--topic", topic, "--datamart", schema.datamart)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    text = checked.stdout
    assert "delta 4: MISSING: no increment of it is in the topic" in text
    assert "delta 7: MISSING: no complete increment: run run-a lacks stream 2 last chunk" in text
    assert f"other datamart in the topic: {other.datamart}" in text
    assert "restorable up to delta 3" in text
    assert "a restore stops before delta 4" in text

    done = restore("run", "--topic", topic, "--datamart", schema.datamart)
    assert done.returncode == 1
    assert "stopped before delta 4: no increment of it is in the topic" in done.stderr
    assert [e.delta_num for e in ReplicaStore(replica_dsn).registry(schema.datamart)] == [
        0,
        1,
        2,
        3,
    ]
    assert_matches_model(replica_dsn, replica_model(source, 3))


@pytest.mark.parametrize("whole_history", [False, True], ids=["history-to-date", "whole-history"])
def test_the_schema_comes_from_the_changelog_a_table_created_in_5_and_one_dropped_in_12(
    restore: Restore, topic: str, marketing: LogicalSchema, replica_dsn: str, whole_history: bool
) -> None:
    schema = renamed(marketing)
    sales, stores, agreements = (schema.table(n) for n in ("sales", "stores", "agreements"))
    dm = schema.datamart
    messages, model = changelog_backup(schema, "run-s", whole_history=whole_history)
    write_topic(restore.broker, topic, 1, messages)

    checked = restore("check", "--topic", topic, "--datamart", dm)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "2 CREATE TABLE agreements" in checked.stdout
    assert "3 DROP TABLE stores" in checked.stdout
    done = restore("run", "--topic", topic, "--datamart", dm)  # no --schema anywhere
    assert done.returncode == 0, done.stderr
    assert "table dropped by the changelog" in done.stderr

    # The dropped table's rows are all kept, renamed, as they were before delta 12.
    kept = stores.model_copy(update={"name": "stores_dropped_before_12"})
    kept_model = ReplicaModel(schema.model_copy(update={"tables": (kept,)}))
    kept_model.tables[kept.name] = model.tables["stores"]
    assert_matches_model(replica_dsn, kept_model)
    rest = schema.model_copy(update={"tables": (sales, agreements)})
    rest_model = ReplicaModel(rest)
    rest_model.tables.update({t.name: model.tables[t.name] for t in rest})
    assert_matches_model(replica_dsn, rest_model)
    store = ReplicaStore(replica_dsn)
    assert store.stored_schema(dm) == rest  # the catalog: the schema now
    assert [v[0] for v in store.views(dm)] == ["big_sales"]
    assert [e.delta_num for e in store.registry(dm)] == list(range(15))


def test_a_restore_killed_mid_way_continues_where_it_stopped(
    restore: Restore, topic: str, marketing: LogicalSchema, replica_dsn: str
) -> None:
    schema = renamed(marketing)
    source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=120, seed=13))
    write_topic(
        restore.broker,
        topic,
        2,
        incremental(source, range(16), BackupLayout(threads=2, partitions=2, chunk_rows=30), None),
    )
    log = restore.data_dir / "killed.log"
    restore.data_dir.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "podd_restore.cli",
                "run",
                "--topic",
                topic,
                "--datamart",
                schema.datamart,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **restore.env()},
        )
        deadline = time.monotonic() + 300
        # Killed once three deltas are in: the fourth is being read again and staged then
        # (one delta ahead of the apply), or applying.
        while log.read_text().count('"delta restored"') < 3:
            assert child.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    applied = [e.delta_num for e in ReplicaStore(replica_dsn).registry(schema.datamart)]
    assert 3 <= len(applied) < 16
    assert applied == list(range(len(applied)))
    done = restore("run", "--topic", topic, "--datamart", schema.datamart)
    assert done.returncode == 0, done.stderr
    assert f"restored deltas {len(applied)}-15" in done.stdout
    model = replica_model(source, 15)
    assert_matches_model(replica_dsn, model)
    assert_as_of_every_delta(replica_dsn, model, 15)
    registry = ReplicaStore(replica_dsn).registry(schema.datamart)
    assert [e.delta_num for e in registry] == list(range(16))  # one row per delta


def test_bad_messages_are_named_by_place_and_nothing_of_their_delta_is_applied(
    restore: Restore, topic: str, marketing: LogicalSchema, replica_dsn: str
) -> None:
    schema = renamed(marketing)
    source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=30, seed=5))
    layout = BackupLayout(threads=1, partitions=1, chunk_rows=50)
    messages = list(incremental(source, range(6), layout, "run-b"))
    garbage_key = BackupMessage(b"\x00not an avro key", b"whatever", 0, None)
    # Delta 3: its sales body is a stores body (a body that does not match its table).
    three = next(i for i, m in enumerate(messages) if _is_table(m, 3, "sales"))
    stores_body = next(m for m in messages if _is_table(m, 3, "stores")).value
    messages[three] = BackupMessage(messages[three].key, stores_body, 0, "sales")
    # Delta 4: an undecodable body.
    four = next(i for i, m in enumerate(messages) if _is_table(m, 4, "sales"))
    messages[four] = BackupMessage(messages[four].key, b"Obj\x01garbage", 0, "sales")
    write_topic(restore.broker, topic, 1, [garbage_key, *messages])

    checked = restore("check", "--topic", topic, "--datamart", schema.datamart)
    assert f"unreadable key at topic {topic} partition 0 offset 0" in checked.stdout
    done = restore("run", "--topic", topic, "--datamart", schema.datamart)
    assert done.returncode == 1
    offset = three + 1  # the garbage key went first
    assert f"delta 3 (run run-b), topic {topic} partition 0 offset {offset}" in done.stderr
    assert "SCHEMA_MISMATCH" in done.stderr
    assert [e.delta_num for e in ReplicaStore(replica_dsn).registry(schema.datamart)] == [0, 1, 2]
    assert_matches_model(replica_dsn, replica_model(source, 2))


def test_a_row_error_found_by_the_executors_names_its_message(
    restore: Restore, topic: str, marketing: LogicalSchema, replica_dsn: str
) -> None:
    schema = renamed(marketing)
    source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=30, seed=6))
    layout = BackupLayout(threads=1, partitions=1, chunk_rows=50)
    messages = list(incremental(source, range(3), layout, "run-n"))
    sales = schema.table("sales")
    one = next(i for i, m in enumerate(messages) if _is_table(m, 1, "sales"))
    null_sys_op = encode_backup_body(sales, [DeltaRow((7, None, "x", 1, 1, None), None)])  # type: ignore[arg-type]
    messages[one] = BackupMessage(messages[one].key, null_sys_op, 0, "sales")
    write_topic(restore.broker, topic, 1, messages)
    # Every delta to the executors: the run starts Spark beside its first fetch.
    done = restore(
        "run",
        "--topic",
        topic,
        "--datamart",
        schema.datamart,
        env={"PODD_RESTORE_IN_DRIVER_MAX_MIB": "0"},
    )
    assert done.returncode == 1
    assert f"delta 1 (run run-n), topic {topic} partition 0 offset {one}" in done.stderr
    assert "SCHEMA_MISMATCH" in done.stderr
    assert "sys_op" in done.stderr
    assert [e.delta_num for e in ReplicaStore(replica_dsn).registry(schema.datamart)] == [0]
    assert_matches_model(replica_dsn, replica_model(source, 0))


def _is_table(message: BackupMessage, delta: int, table: str) -> bool:
    key = decode_message(BackupKey, message.key)
    return key.delta_num == delta and key.table_name == table


def test_a_backup_in_every_kafka_codec_with_unreadable_batches_restores(
    restore: Restore, topic: str, marketing: LogicalSchema, replica_dsn: str
) -> None:
    """Backups written by clients that compress (each codec writes a part of the topic), and
    batches nobody can read in between: those are skipped and named, the rest restores."""
    schema = renamed(marketing)
    source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=60, seed=5))
    messages = list(
        incremental(source, range(8), BackupLayout(threads=1, partitions=2, chunk_rows=20), None)
    )
    junk = rb.with_payload(rb.record_batch([(b"k", b"v" * 40)] * 2), "zstd", os.urandom(100))
    codecs: list[Compression] = ["gzip", "snappy", "lz4", "zstd"]
    share = -(-len(messages) // len(codecs))
    for i, codec in enumerate(codecs):
        write_topic(restore.broker, topic, 2, messages[i * share : (i + 1) * share], codec)
        for partition in range(2):
            asyncio.run(rb.send_raw([restore.broker], topic, partition, junk))
    done = restore("run", "--topic", topic, "--datamart", schema.datamart)
    assert done.returncode == 0, done.stderr
    assert "restored deltas 0-7" in done.stdout
    assert (done.stdout + done.stderr).count("a record batch that cannot be read was skipped") == 8
    assert_matches_model(replica_dsn, replica_model(source, 7))


def test_an_appended_increment_that_differs_stops_the_run_naming_both_until_one_is_named(
    restore: Restore, topic: str, marketing: LogicalSchema, replica_dsn: str
) -> None:
    """Whoever can write the backup topic could append a complete increment of a delta,
    and the latest run of a delta won: the next restore applied the appended rows. Now two
    complete increments of one delta that differ are never chosen between."""
    schema = renamed(marketing)
    source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=40, seed=31))
    forged = WorkloadSource(schema, WorkloadSpec(rows_per_delta=40, seed=32))
    layout = BackupLayout(threads=2, partitions=2, chunk_rows=10)
    messages = list(incremental(source, range(8), layout, "run-1"))
    messages += list(incremental(forged, [5], layout, "run-x"))  # appended later
    write_topic(restore.broker, topic, 2, messages)

    done = restore("run", "--topic", topic, "--datamart", schema.datamart)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "delta 5 is in 2 complete increments that differ" in done.stderr
    assert "run run-1 dated" in done.stderr
    assert "run run-x dated" in done.stderr
    assert [e.delta_num for e in ReplicaStore(replica_dsn).registry(schema.datamart)] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert_matches_model(replica_dsn, replica_model(source, 4))

    named = restore(
        "run", "--topic", topic, "--datamart", schema.datamart, "--increment-id", "run-1"
    )
    assert named.returncode == 0, named.stderr
    assert_matches_model(replica_dsn, replica_model(source, 7))
