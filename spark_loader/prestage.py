"""Stage the complete streams of a transfer that still arrives ("prestage").

The load of a delta used to start at its last chunk: receive, then stage, then apply, one
after another. A stream is often complete long before its transfer (an origin sends its
tables one after another), and staging (decoding the Avro bodies, keeping the last row per
key, COPY into the staging table) is most of a load's work. `Prestager.prestage` does that
work for the streams complete so far, while later chunks still arrive; the load then
applies those tables without staging them again (`spark_loader.prestaged`).

It changes nothing a load promises:
* it takes the datamart's lock without waiting (a load runs: nothing is prestaged) and
  stages only the delta the registry expects next;
* it writes staging tables only, never the replica: a transfer later refused (`BAD_CHUNK`,
  `SCHEMA_MISMATCH`, `INCOMPLETE_DELTA`) leaves the replica as it was, and the next load
  stages those tables again;
* a failure of any kind is logged and dropped: the load stages the table itself and meets
  the same row error, answered as before.
"""

from __future__ import annotations

import time

import psycopg
import structlog

from protocol.errors import PoddError
from spark_loader.loader import DeltaLoader
from spark_loader.prestaged import remember
from spark_loader.staging_steps import staging_steps
from spark_loader.store_sql import datamart_lock_key
from spark_loader.transfer import StagedTransfer

log = structlog.get_logger("spark_loader")


class Prestager:
    """Prestages with a loader's connections, settings and Spark session."""

    def __init__(self, loader: DeltaLoader) -> None:
        self.loader = loader

    def prestage(self, transfer: StagedTransfer) -> list[str]:
        """Stage the streams `transfer`'s manifest names (complete ones); the tables staged,
        none when the datamart is locked by a load, the delta is not the one expected next,
        or staging failed."""
        manifest = transfer.manifest
        datamart = self.loader.datamart(manifest.datamart)
        if datamart is None or not manifest.streams:
            return []
        ids = {"datamart": manifest.datamart, "deltaNum": manifest.delta_num,
               "requestId": manifest.request_id}  # fmt: skip
        started = time.perf_counter()
        tables = [datamart.schema.table(s.table_name) for s in manifest.streams]
        try:
            with self.loader.connections.session() as session:
                conn = session.conn
                locked = conn.execute(
                    "SELECT pg_try_advisory_lock(%s)", (datamart_lock_key(datamart.name),)
                ).fetchone()
                if not (locked and locked[0]):
                    return []
                if self.loader.verify_sequence(conn, transfer) is not None:
                    return []  # applied already
                steps = staging_steps(
                    conn, datamart, transfer, tables, self.loader.settings, self.loader.spark,
                    self.loader.executor_dsn,
                )  # fmt: skip
                for table, step in zip(tables, steps, strict=True):
                    staged, received = step()
                    remember(conn, manifest, table.name, staged, received)
        except Exception as exc:  # the load stages these tables itself, and says what failed
            level = log.info if isinstance(exc, PoddError | psycopg.Error) else log.warning
            level("prestage dropped: the load stages these tables", **ids,
                  reason=f"{type(exc).__name__}: {str(exc)[:300]}")  # fmt: skip
            return []
        names = [t.name for t in tables]
        log.info("prestaged", **ids, tables=names,
                 seconds=round(time.perf_counter() - started, 3))  # fmt: skip
        return names
