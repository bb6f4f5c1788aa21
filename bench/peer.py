"""The peer baseline: what a user would write without this project.

One consumer reads the same `delta.in` messages, decodes every row with fastavro and applies
it with a per-row statement, batched the way Kafka Connect's JDBC sink does it (an upsert,
`INSERT ... ON CONFLICT DO UPDATE`, for `sys_op = 0`, a `DELETE` for `sys_op = 1`; up to
3,000 rows per batch, sent with `executemany`, committed per batch). It keeps only the
current rows: no history, no delta registry, no atomic delta, no last-row-per-key across
partitions. So it does less than the agent, and is still the baseline users compare with.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Iterable
from typing import Any

import fastavro
import psycopg

from bench.e2e import Sent, delta_records
from podd_kafka.settings import KafkaSettings
from protocol.codec import decode_delta_in_key
from protocol.schema import LogicalSchema, Table
from replica_store.store_sql import physical, q

BATCH_ROWS = 3000


def create_peer_tables(dsn: str, schema: LogicalSchema, as_of: int) -> str:
    """The peer's tables (current rows only), filled with the replica's state as of a delta."""
    peer = f"peer_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {q(peer)}")
        for table in schema:
            columns = ", ".join(f"{q(c.name)} {c.type.to_postgres()}" for c in table.columns)
            key = ", ".join(q(k) for k in table.primary_key)
            target = f"{q(peer)}.{q(table.name)}"
            conn.execute(f"CREATE TABLE {target} ({columns}, PRIMARY KEY ({key}))")
            as_of_function = f"{q(schema.datamart)}.{q(table.name + '_as_of')}"
            conn.execute(f"INSERT INTO {target} SELECT * FROM {as_of_function}(%s)", (as_of,))
            conn.execute(f"ANALYZE {target}")
    return peer


def _statements(peer: str, table: Table) -> tuple[str, str]:
    target = f"{q(peer)}.{q(table.name)}"
    names = [q(c.name) for c in table.columns]
    key = [q(k) for k in table.primary_key]
    updates = ", ".join(f"{n} = EXCLUDED.{n}" for n in names if n not in key)
    upsert = (
        f"INSERT INTO {target} ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    )
    delete = f"DELETE FROM {target} WHERE " + " AND ".join(f"{k} = %s" for k in key)
    return upsert, delete


class _Batcher:
    """Rows in arrival order, flushed as runs of one statement, `BATCH_ROWS` at most."""

    def __init__(self, conn: psycopg.Connection, schema: LogicalSchema, peer: str) -> None:
        self.conn = conn
        self.statements = {t.name: _statements(peer, t) for t in schema}
        self.tables = {t.name: t for t in schema}
        self.run: tuple[str, list[Any]] | None = None
        self.pending = 0

    def add(self, table_name: str, rows: Iterable[Any]) -> int:
        table = self.tables[table_name]
        upsert, delete = self.statements[table_name]
        names = [c.name for c in table.columns]
        count = 0
        for row in rows:
            values = list(row.values())
            if values[-1] == 1:
                sql, params = delete, [values[p] for p in table.key_positions]
            else:
                sql, params = upsert, values[: len(names)]
            if self.run is None or self.run[0] != sql:
                self._flush_run()
                self.run = (sql, [])
            self.run[1].append(params)
            self.pending += 1
            count += 1
            if self.pending >= BATCH_ROWS:
                self.flush()
        return count

    def _flush_run(self) -> None:
        if self.run is not None and self.run[1]:
            with self.conn.cursor() as cursor:
                cursor.executemany(self.run[0], self.run[1])
        self.run = None

    def flush(self) -> None:
        self._flush_run()
        self.conn.commit()
        self.pending = 0


async def run_peer(
    settings: KafkaSettings,
    bootstrap: list[str],
    sent: Sent,
    dsn: str,
    schema: LogicalSchema,
    peer: str,
) -> tuple[float, int]:
    """Seconds to consume and apply the delta's messages row by row; rows applied."""
    rows = 0
    async with delta_records(settings, bootstrap, sent) as records:
        with psycopg.connect(dsn) as conn:
            batcher = _Batcher(conn, schema, peer)
            started = time.perf_counter()
            async for record in records:
                key = decode_delta_in_key(record.key or b"")
                if record.value:
                    reader = fastavro.reader(io.BytesIO(record.value))
                    rows += batcher.add(key.table_name, reader)
            batcher.flush()
            seconds = time.perf_counter() - started
    return seconds, rows


def live_rows(dsn: str, schema_name: str, tables: list[str], *, actual: bool) -> int:
    """Rows in the peer's tables, or in the replica's `t_actual` tables."""
    with psycopg.connect(dsn) as conn:
        total = 0
        for name in tables:
            target = (
                physical(schema_name, name, "actual") if actual else (f"{q(schema_name)}.{q(name)}")
            )
            row = conn.execute(f"SELECT count(*) FROM {target}").fetchone()
            total += int(row[0]) if row else 0
        return total
