"""One Spark job stages every table of a transfer, table slice by table slice, no shuffle.

A slice is a share of one table's keys. Staging a slice reads that table's chunks in order
(chunk number, then position), decodes them, keeps the rows whose key falls in the slice,
keeps the last row per key, and COPYs them (binary) into the table's staging table. All rows
of a key meet in one slice, so the last-row rule needs no shuffle.

Most tables are one slice. A table whose chunk files exceed `max_slice_bytes` is cut into
several slices by a hash of the key, so memory stays bounded as deltas grow (each slice
decodes every chunk of its table, and keeps its share). When there are fewer slices than
executor cores, the largest tables are cut further so every core has work. The slices are
then packed into at most one task per core (largest first, onto the lightest task): a
Spark task costs tens of milliseconds, which is what a small delta's load is made of.

The shuffle this replaces (encode, group by key, sort by table, COPY) moved every row
through the JVM and back into Python twice and took 3x longer than decoding.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg
from pyspark import TaskContext
from pyspark.sql import SparkSession

from protocol.body import BodyFormat
from protocol.errors import ErrorCode, ProtocolError, error_for
from protocol.ocf import OcfLimits
from protocol.schema import Table
from replica_store.pg_copy import HEADER, TRAILER
from replica_store.store_sql import SLICE_COLUMN
from spark_loader.slice_encode import (
    ChunkRefused,
    EncodedSlice,
    TableSlice,
    copy_tuples,
    encode_slice,
)

#: Below this many bytes of chunk files a table is never cut for parallelism's sake.
MIN_SPLIT_BYTES = 4 * 2**20


@dataclass(frozen=True)
class StagingTask:
    """What one Spark task stages, one slice after the other, on one connection."""

    slices: tuple[TableSlice, ...]


@dataclass(frozen=True)
class StagingTarget:
    """Where a table's slices are staged: the (quoted) staging table, its COPY statement,
    and the advisory-lock key that serialises two attempts at one of its slices."""

    table: str
    copy: str
    lock_key: int


@dataclass(frozen=True)
class SliceCounts:
    table: int
    staged: int
    received: int


@dataclass(frozen=True)
class SliceRefusal:
    """A slice whose rows the protocol refuses (`BAD_CHUNK`, `SCHEMA_MISMATCH`): the code
    travels back from the executor as data, never as exception text."""

    table: int
    code: ErrorCode
    message: str
    chunk: int | None = None


def plan_tasks(
    chunks: Sequence[tuple[int, int, str, int]], parallelism: int, max_slice_bytes: int
) -> list[StagingTask]:
    """Tasks for (table, chunk number, path, size) entries; every table is in one at least."""
    by_table: dict[int, list[tuple[int, str, int]]] = {}
    for table, number, path, size in chunks:
        by_table.setdefault(table, []).append((number, path, size))
    sizes = {t: sum(s for _, _, s in entries) for t, entries in by_table.items()}
    slices = {t: max(1, math.ceil(size / max_slice_bytes)) for t, size in sizes.items()}
    while sum(slices.values()) < parallelism:
        widest = max(slices, key=lambda t: sizes[t] / slices[t])
        if sizes[widest] / (slices[widest] + 1) < MIN_SPLIT_BYTES:
            break
        slices[widest] += 1
    pieces: list[TableSlice] = []
    for table, entries in sorted(by_table.items()):
        ordered = tuple((number, path) for number, path, _ in sorted(entries))
        count = slices[table]
        pieces.extend(TableSlice(table, s, count, ordered, sizes[table]) for s in range(count))
    bins: list[list[TableSlice]] = [[] for _ in range(min(max(1, parallelism), len(pieces)))]
    loads = [0.0] * len(bins)
    for piece in sorted(pieces, key=lambda p: -p.size / p.slices):
        lightest = loads.index(min(loads))
        bins[lightest].append(piece)
        loads[lightest] += piece.size / piece.slices
    return [StagingTask(tuple(b)) for b in bins if b]


def _stage_slice(
    conn: psycopg.Connection,
    task: TableSlice,
    tables: Sequence[Table],
    target: StagingTarget,
    limits: OcfLimits,
    body_format: BodyFormat,
    *,
    replace_slice: bool = True,
    ahead: Mapping[TableSlice, EncodedSlice] | None = None,
) -> SliceCounts:
    """Decode, filter, keep the last row per key (`encode_slice`; or take what `ahead`
    holds of this slice, decoded as the same table from the same files), COPY: one slice.

    Exactly once under retries: Spark may run a task again (a failure after its commit, or
    speculation). Under a lock on (table, slice), the slice's earlier rows are deleted
    before its COPY, in the task's one transaction: whichever attempt commits last leaves
    the only copy. `replace_slice=False`: the target is known empty and nobody else writes
    it (the caller set `podd.slice`)."""
    encoded = None if ahead is None else ahead.get(task)
    if encoded is None or encoded.table != tables[task.table] or encoded.format != body_format:
        encoded = encode_slice(task, tables, limits, body_format)
    staged, count = encoded.staged, encoded.count
    if count:
        if replace_slice:
            conn.execute(
                "SELECT pg_advisory_xact_lock(%s, %s), set_config('podd.slice', %s, true)",
                (target.lock_key, task.slice, str(task.slice)),
            )
            conn.execute(f"DELETE FROM {target.table} WHERE {SLICE_COLUMN} = %s", (task.slice,))
        with conn.cursor().copy(target.copy) as copy:
            copy.write(HEADER)
            for array in staged:
                copy.write(copy_tuples(array))
            copy.write(TRAILER)
    return SliceCounts(task.table, count, encoded.received)


def run_task(
    task: StagingTask,
    tables: Sequence[Table],
    dsn: str,
    targets: dict[int, StagingTarget],
    limits: OcfLimits,
    fail_first_attempt: bool = False,
    body_format: BodyFormat = BodyFormat.DELTA_IN,
) -> list[SliceCounts | SliceRefusal]:
    """One Spark task on its own connection (`stage_task`).

    `fail_first_attempt` (tests only): the first attempt fails after its commit."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        done = stage_task(conn, task, tables, targets, limits, body_format)
    context = TaskContext.get()
    if fail_first_attempt and context is not None and context.attemptNumber() == 0:
        raise RuntimeError("fault injection: the task's first attempt fails after its COPY")
    return done


class _Refused(Exception):
    def __init__(self, refusal: SliceRefusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def stage_task(
    conn: psycopg.Connection,
    task: StagingTask,
    tables: Sequence[Table],
    targets: dict[int, StagingTarget],
    limits: OcfLimits,
    body_format: BodyFormat = BodyFormat.DELTA_IN,
    *,
    in_open_transaction: bool = False,
    ahead: Mapping[TableSlice, EncodedSlice] | None = None,
) -> list[SliceCounts | SliceRefusal]:
    """A task's slices in turn, in one transaction on `conn` (an autocommit connection);
    at the first refused slice, nothing of the task is staged and the refusal is its result.
    `in_open_transaction`: in the transaction `conn` has open instead, into targets that
    only it writes and that start empty: no lock, no slice replaced, nothing committed
    (after a refusal, the caller rolls back)."""
    done: list[SliceCounts | SliceRefusal] = []
    replace = not in_open_transaction
    try:
        with contextlib.nullcontext() if in_open_transaction else conn.transaction():
            for piece in task.slices:
                target = targets[piece.table]
                try:
                    done.append(
                        _stage_slice(
                            conn,
                            piece,
                            tables,
                            target,
                            limits,
                            body_format,
                            replace_slice=replace,
                            ahead=ahead,
                        )
                    )
                except ChunkRefused as refused:
                    error = refused.error
                    raise _Refused(
                        SliceRefusal(piece.table, error.code, error.message, refused.chunk)
                    ) from None
                except ProtocolError as exc:
                    raise _Refused(SliceRefusal(piece.table, exc.code, exc.message)) from None
    except _Refused as refused:  # the transaction rolled back
        return [refused.refusal]
    return done


def stage_slices(
    spark: SparkSession,
    tables: Sequence[Table],
    tasks: Sequence[StagingTask],
    dsn: str,
    targets: dict[int, StagingTarget],
    limits: OcfLimits,
    fail_first_attempt: bool = False,
    body_format: BodyFormat = BodyFormat.DELTA_IN,
) -> dict[int, tuple[int, int]]:
    """Run every task, one Spark partition each; (staged, received) per table position.

    A refused slice raises its protocol error here, on the driver, with its code."""
    if not tasks:
        return {}
    jobs = spark.sparkContext.parallelize(list(tasks), len(tasks))
    results = jobs.flatMap(
        lambda task: run_task(task, tables, dsn, targets, limits, fail_first_attempt, body_format)
    ).collect()
    return _totals(results, tables)


def stage_in_driver(
    conn: psycopg.Connection,
    tables: Sequence[Table],
    tasks: Sequence[StagingTask],
    targets: dict[int, StagingTarget],
    limits: OcfLimits,
    body_format: BodyFormat = BodyFormat.DELTA_IN,
    *,
    in_open_transaction: bool = False,
    ahead: Mapping[TableSlice, EncodedSlice] | None = None,
) -> dict[int, tuple[int, int]]:
    """The same tasks, one after the other in this process on the loader's connection: for
    a small delta, a Spark job's fixed cost (tens to hundreds of milliseconds) and a
    connection's set-up (10 ms) are most of the load. `in_open_transaction`: see
    `stage_task` (`temp_staging`); `ahead`: slices already encoded (`decode_ahead`)."""
    if in_open_transaction:
        conn.execute("SELECT set_config('podd.slice', '0', true)")
    results: list[SliceCounts | SliceRefusal] = []
    for task in tasks:
        results += stage_task(
            conn,
            task,
            tables,
            targets,
            limits,
            body_format,
            in_open_transaction=in_open_transaction,
            ahead=ahead,
        )
    return _totals(results, tables)


def _totals(
    results: Sequence[SliceCounts | SliceRefusal], tables: Sequence[Table]
) -> dict[int, tuple[int, int]]:
    """(staged, received) per table position; a refused slice raises its protocol error."""
    refusals = [r for r in results if isinstance(r, SliceRefusal)]
    if refusals:
        first = min(refusals, key=lambda r: (r.table, r.chunk or 0))
        error = error_for(first.code, first.message)
        if first.chunk is not None:
            error.chunk = (tables[first.table].name, first.chunk)
        raise error
    totals: dict[int, tuple[int, int]] = {}
    for r in results:
        assert isinstance(r, SliceCounts)
        staged, received = totals.get(r.table, (0, 0))
        totals[r.table] = (staged + r.staged, received + r.received)
    return totals
