"""One Spark job stages every table of a transfer.

The decode stage turns each row into its binary COPY tuple right away, keyed by its table
and the binary encoding of its primary key. The shuffle then moves opaque bytes, the last
row per (table, key) is `max(struct(chunk, position, tuple))`, and the COPY stage only
concatenates tuples, switching COPY streams as the table changes (partitions are sorted by
table). Per-table jobs paid Spark's job overhead once per table and converted typed rows to
and from Arrow around the shuffle; this does neither.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from protocol.body import decode_body
from protocol.schema import Table
from spark_loader.pg_copy import HEADER, TRAILER, copy_kinds, key_kinds, tuples_array

Stager = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]

ENCODED = T.StructType(
    [
        T.StructField("t", T.IntegerType(), nullable=False),
        T.StructField("k", T.BinaryType(), nullable=False),
        T.StructField("c", T.LongType(), nullable=False),
        T.StructField("p", T.LongType(), nullable=False),
        T.StructField("row", T.BinaryType(), nullable=False),
    ]
)
_ENCODED_ARROW = pa.schema(
    [
        ("t", pa.int32()),
        ("k", pa.binary()),
        ("c", pa.int64()),
        ("p", pa.int64()),
        ("row", pa.binary()),
    ]
)
_COUNTS = "t int, staged long, received long"


def _encoder(tables: Sequence[Table]) -> Stager:
    row_kinds = [copy_kinds(t) for t in tables]
    keys = [(list(t.key_positions), key_kinds(t)) for t in tables]

    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            work = zip(
                batch.column("t").to_pylist(),
                batch.column("chunk").to_pylist(),
                batch.column("path").to_pylist(),
                strict=True,
            )
            for index, chunk, path in work:
                table = tables[index]
                with open(path, "rb") as handle:
                    body = handle.read()
                position = 0
                for rows in decode_body(table, body):
                    n = rows.num_rows
                    positions, kinds = keys[index]
                    yield pa.RecordBatch.from_arrays(
                        [
                            pa.array(np.full(n, index, dtype=np.int32)),
                            tuples_array(kinds, rows.select(positions)),
                            pa.array(np.full(n, chunk, dtype=np.int64)),
                            pa.array(np.arange(position, position + n, dtype=np.int64)),
                            tuples_array(row_kinds[index], rows),
                        ],
                        schema=_ENCODED_ARROW,
                    )
                    position += n

    return encode


def last_tuples(
    spark: SparkSession, tables: Sequence[Table], chunks: Sequence[tuple[int, int, str]]
) -> DataFrame:
    """(t, row, n): per table and key the last row's COPY tuple, and how many rows it had."""
    paths = spark.createDataFrame(list(chunks), "t int, chunk long, path string")
    parallelism = max(1, min(len(chunks), spark.sparkContext.defaultParallelism))
    encoded = paths.repartition(parallelism).mapInArrow(_encoder(tables), ENCODED)
    winner = F.max(F.struct("c", "p", "row")).alias("w")
    grouped = encoded.groupBy("t", "k").agg(winner, F.count(F.lit(1)).alias("n"))
    return grouped.select("t", F.col("w.row").alias("row"), "n")


def stage_tuples(last: DataFrame, stager: Stager) -> dict[int, tuple[int, int]]:
    """Run the stager on every partition (sorted by table); (staged, received) per table."""
    counts = last.sortWithinPartitions("t").mapInArrow(stager, _COUNTS)
    totals = counts.groupBy("t").agg(F.sum("staged"), F.sum("received")).collect()
    return {int(r[0]): (int(r[1]), int(r[2])) for r in totals}


class _TableCopies:
    """One COPY at a time on one connection (psycopg allows no more), switched by table."""

    def __init__(self, conn: psycopg.Connection, statements: dict[int, str]) -> None:
        self.conn = conn
        self.statements = statements
        self.table: int | None = None
        self._context: Any = None
        self._copy: Any = None

    def write(self, table: int, data: memoryview) -> None:
        if table != self.table:
            self.finish()
            self._context = self.conn.cursor().copy(self.statements[table])
            self._copy = self._context.__enter__()
            self._copy.write(HEADER)
            self.table = table
        self._copy.write(data)

    def finish(self) -> None:
        if self._context is not None:
            self._copy.write(TRAILER)
            self._context.__exit__(None, None, None)
            self._context = self._copy = self.table = None


def tuple_stager(dsn: str, copy_statements: dict[int, str]) -> Stager:
    """A `mapInArrow` function: COPY each table's tuples of the partition into its staging.

    The partition's rows come sorted by table; all COPYs commit together at the end.
    """

    def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        staged: dict[int, int] = {}
        received: dict[int, int] = {}
        first = next(batches, None)
        if first is not None:
            with psycopg.connect(dsn) as conn:
                copies = _TableCopies(conn, copy_statements)
                for batch in itertools.chain([first], batches):
                    tables = batch.column("t").to_numpy()
                    counts = batch.column("n").to_numpy()
                    rows = batch.column("row").cast(pa.large_binary())
                    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int64)[
                        rows.offset : rows.offset + len(rows) + 1
                    ]
                    data = memoryview(rows.buffers()[2] or b"")
                    bounds = [0, *(np.flatnonzero(np.diff(tables)) + 1), len(tables)]
                    for start, end in itertools.pairwise(bounds):
                        table = int(tables[start])
                        copies.write(table, data[offsets[start] : offsets[end]])
                        staged[table] = staged.get(table, 0) + (end - start)
                        received[table] = received.get(table, 0) + int(counts[start:end].sum())
                copies.finish()
        names = sorted(staged)
        yield pa.RecordBatch.from_pydict(
            {
                "t": pa.array(names, pa.int32()),
                "staged": pa.array([staged[t] for t in names], pa.int64()),
                "received": pa.array([received[t] for t in names], pa.int64()),
            }
        )

    return stage
