"""The honest floors of the end-to-end figure (issue 16).

* (a) `consume_and_decode`: the same `delta.in` messages fetched from the broker, and every
  row decoded by this project's fastest decoder (`protocol.body.decode_body`, Arrow
  batches), in one process: the least work that reads the delta.
* (b) `keyed_copy_floor`: the rows the replica keeps (the last row per key of each table)
  COPYed, binary, into logged tables with the replica's primary key (key, `sys_from`) that
  already hold the pre-load, in one transaction: the least work that makes the rows durable
  and keyed. Decoding and encoding happen before the clock starts.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import psycopg
import pyarrow as pa

from bench.cpu import MachineCpu
from bench.datagen import bench_schema
from bench.e2e import BenchError, Sent, delta_records
from podd_kafka.settings import KafkaSettings
from protocol.body import decode_body
from protocol.codec import decode_delta_in_key
from protocol.schema import LogicalSchema, Table
from replica_store.pg_copy import HEADER, TRAILER, copy_kinds, key_kinds, tuples_array
from replica_store.store_sql import q
from replica_store.transfer import StagedTransfer
from spark_loader.slice_encode import copy_tuples, last_per_key


async def consume_and_decode(
    settings: KafkaSettings, bootstrap: list[str], sent: Sent, schema: LogicalSchema
) -> tuple[float, int, dict[str, float]]:
    """Floor (a): seconds to fetch the delta's messages and decode every row; rows decoded;
    the machine's CPU seconds meanwhile (`bench.cpu`)."""
    rows = messages = 0
    tables = {t.name: t for t in schema}
    async with delta_records(settings, bootstrap, sent) as records:
        with MachineCpu(None) as cpu:
            started = time.perf_counter()
            async for record in records:
                messages += 1
                key = decode_delta_in_key(record.key)
                if record.value:
                    for batch in decode_body(tables[key.table_name], record.value):
                        rows += batch.num_rows
            seconds = time.perf_counter() - started
    if messages != sent.messages:
        raise BenchError(f"floor (a) read {messages} messages, {sent.messages} were sent")
    return seconds, rows, cpu.timeline.whole()


def _kept_copy_data(table: Table, transfer: StagedTransfer) -> tuple[bytes, int]:
    """The binary COPY data of the table's rows the replica keeps (the last per key, by the
    loader's own functions), and how many rows that is."""
    positions, kinds, row_kinds = list(table.key_positions), key_kinds(table), copy_kinds(table)
    keys: list[pa.Array] = []
    rows: list[pa.Array] = []
    for _, path in transfer.chunks_of(table.name):
        for batch in decode_body(table, path.read_bytes()):
            keys.append(tuples_array(kinds, batch.select(positions)))
            rows.append(tuples_array(row_kinds, batch))
    kept = last_per_key(keys, rows)
    data = b"".join([HEADER, *(copy_tuples(a) for a in kept), TRAILER])
    return data, sum(len(a) for a in kept)


def keyed_copy_floor(
    dsn: str, preload: StagedTransfer, delta: StagedTransfer
) -> tuple[float, int, dict[str, float]]:
    """Floor (b): seconds of one transaction COPYing the delta's kept rows into keyed,
    logged tables holding the pre-load (set up untimed); rows COPYed; the machine's CPU
    seconds meanwhile."""
    schema = bench_schema(delta.manifest.datamart, len(delta.manifest.streams))
    floor_schema = f"keyed_floor_{uuid.uuid4().hex[:8]}"
    copies: list[tuple[str, bytes]] = []  # (COPY statement, data) per table
    rows = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {q(floor_schema)}")
        for table in schema:
            target = f"{q(floor_schema)}.{q(table.name)}"
            columns = [f"{q(c.name)} {c.type.to_postgres()}" for c in table.columns]
            key = ", ".join(q(k) for k in (*table.primary_key, "sys_from"))
            conn.execute(
                f"CREATE TABLE {target} ({', '.join(columns)}, sys_op int, "
                f"sys_from bigint NOT NULL DEFAULT 0, sys_to bigint, PRIMARY KEY ({key}))"
            )
            names = ", ".join([*(q(c.name) for c in table.columns), "sys_op"])
            statement = f"COPY {target} ({names}) FROM STDIN (FORMAT BINARY)"
            with conn.cursor().copy(statement) as copy:
                copy.write(_kept_copy_data(table, preload)[0])
            conn.execute(f"ALTER TABLE {target} ALTER sys_from SET DEFAULT 1")
            data, kept = _kept_copy_data(table, delta)
            rows += kept
            copies.append((statement, data))
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            conn.execute("CHECKPOINT")  # the pre-load's writes are not the floor's
        with MachineCpu(None) as cpu:
            started = time.perf_counter()
            with conn.transaction():
                for statement, data in copies:
                    with conn.cursor().copy(statement) as copy:
                        copy.write(data)
            seconds = time.perf_counter() - started
        conn.execute(f"DROP SCHEMA {q(floor_schema)} CASCADE")
    return seconds, rows, cpu.timeline.whole()


def settle_replica(dsn: str) -> float:
    """`VACUUM (ANALYZE)` the whole database; returns the seconds it took.

    Run before each timed measurement, so the autovacuum work that earlier points and the
    pre-load left (up to 2 CPU seconds of autovacuum workers were seen inside the timed
    delta) is not done inside it. The delta's and the floors' own work is still theirs."""
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    return time.perf_counter() - started
