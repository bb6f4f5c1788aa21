"""The CDC peer: what a team would write by hand to follow a Qlik topic into PostgreSQL.

One consumer reads every partition, parses each value with the standard `json` module and
applies each change with a per-row statement, batched the way Kafka Connect's JDBC sink does
(an upsert, `INSERT ... ON CONFLICT DO UPDATE`, for INSERT, UPDATE and REFRESH; a `DELETE`
for DELETE; up to 3,000 rows per batch with `executemany`, committed per batch). It keeps only
the current rows: no history, no deltas, no transaction boundaries, no duplicates removed.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.peer import BATCH_ROWS
from protocol.schema import LogicalSchema, Table
from replica_store.store_sql import q


def create_tables(dsn: str, schema: LogicalSchema) -> str:
    peer = f"cdcpeer_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {q(peer)}")
        for table in schema:
            columns = ", ".join(f"{q(c.name)} {c.type.to_postgres()}" for c in table.columns)
            key = ", ".join(q(k) for k in table.primary_key)
            conn.execute(f"CREATE TABLE {q(peer)}.{q(table.name)} ({columns}, PRIMARY KEY ({key}))")
    return peer


def _statements(peer: str, table: Table) -> tuple[str, str]:
    target = f"{q(peer)}.{q(table.name)}"
    names = [q(c.name) for c in table.columns]
    key = [q(k) for k in table.primary_key]
    values = ", ".join(f"%s::{c.type.to_postgres()}" for c in table.columns)
    updates = ", ".join(f"{n} = EXCLUDED.{n}" for n in names if n not in key)
    upsert = (
        f"INSERT INTO {target} ({', '.join(names)}) VALUES ({values}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    )
    delete = f"DELETE FROM {target} WHERE " + " AND ".join(
        f"{q(k)} = %s::{table.column(k).type.to_postgres()}" for k in table.primary_key
    )
    return upsert, delete


async def follow(
    bootstrap: list[str],
    topic: str,
    partitions: int,
    messages: int,
    dsn: str,
    schema: LogicalSchema,
    peer: str,
) -> tuple[float, int]:
    """Seconds from the first message read to the last batch committed; changes applied."""
    tables = {t.name: t for t in schema}
    statements = {t.name: _statements(peer, t) for t in schema}
    by_id: dict[str, tuple[Table, list[str]]] = {}
    reader = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await reader.start()
    reader.assign([TopicPartition(topic, p) for p in range(partitions)])
    applied = seen = 0
    started: float | None = None
    run: tuple[str, list[list[Any]]] | None = None
    pending = 0
    try:
        with psycopg.connect(dsn) as conn:

            def flush_run() -> None:
                nonlocal run
                if run is not None and run[1]:
                    with conn.cursor() as cursor:
                        cursor.executemany(run[0], run[1])
                run = None

            held: list[dict[str, Any]] = []  # data read before its table's metadata
            while seen < messages:
                batch = await reader.getmany(timeout_ms=500, max_records=5000)
                bodies = [json.loads(r.value or b"{}") for rs in batch.values() for r in rs]
                started = started or time.perf_counter()
                seen += len(bodies)
                for body in bodies:
                    if body["type"] == "MD":
                        message = body["message"]
                        columns = sorted(
                            message["tableStructure"]["tableColumns"].items(),
                            key=lambda c: c[1]["ordinal"],
                        )
                        name = message["lineage"]["table"].lower()
                        by_id[message["schemaId"]] = (tables[name], [c for c, _ in columns])
                if held and len(by_id) == len(tables):
                    bodies, held = held + bodies, []
                for body in bodies:
                    if body["type"] == "MD":
                        continue
                    if body["messageSchemaId"] not in by_id:
                        held.append(body)
                        continue
                    message = body["message"]
                    table, names = by_id[body["messageSchemaId"]]
                    upsert, delete = statements[table.name]
                    if message["headers"]["operation"] == "DELETE":
                        row = message["beforeData"] or message["data"]
                        sql = delete
                        params = [row[names[i]] for i in table.key_positions]
                    else:
                        sql, params = upsert, [message["data"][n] for n in names]
                    if run is None or run[0] != sql:
                        flush_run()
                        run = (sql, [])
                    run[1].append(params)
                    applied += 1
                    pending += 1
                    if pending >= BATCH_ROWS:
                        flush_run()
                        conn.commit()
                        pending = 0
            flush_run()
            conn.commit()
    finally:
        await reader.stop()
    return time.perf_counter() - (started or time.perf_counter()), applied
