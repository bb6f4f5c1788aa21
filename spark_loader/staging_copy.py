"""Runs in the executors: COPY one partition's rows into a staging table (binary format)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from protocol.schema import Table
from spark_loader.pg_copy import HEADER, TRAILER, copy_kinds, encode_batch
from spark_loader.spark_jobs import RECEIVED
from spark_loader.store_sql import q


def copy_statement(staging: str, table: Table) -> str:
    columns = ", ".join([*(q(c.name) for c in table.columns), "sys_op"])
    return f"COPY {staging} ({columns}) FROM STDIN (FORMAT BINARY)"


def partition_stager(
    dsn: str, staging: str, table: Table
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A `mapInArrow` function: COPY the partition, then yield (staged, received)."""
    statement = copy_statement(staging, table)
    kinds = copy_kinds(table)
    width = len(kinds)

    def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        staged = received = 0
        first = next(batches, None)
        if first is not None:
            with psycopg.connect(dsn) as conn, conn.cursor() as cur, cur.copy(statement) as copy:
                copy.write(HEADER)
                for batch in itertools.chain([first], batches):
                    received += int(pc.sum(batch.column(RECEIVED)).as_py() or 0)
                    rows = pa.RecordBatch.from_arrays(
                        batch.columns[:width], names=batch.schema.names[:width]
                    )
                    copy.write(encode_batch(kinds, rows))
                    staged += batch.num_rows
                copy.write(TRAILER)
        yield pa.RecordBatch.from_pydict(
            {"staged": pa.array([staged], pa.int64()), "received": pa.array([received], pa.int64())}
        )

    return stage
