"""Step 3 of a load (`DeltaLoader`): the transfer's tables staged, as one step per table.

Each step returns its table's (staged, received) rows; the loader runs the steps ahead of
its apply transaction (`run_ahead`) and applies each table as soon as its step is done.

* A small delta (up to `in_driver_max_mib` of chunks) is staged at once, here, in the
  driver on the loader's connection: a Spark job's fixed cost would be most of its load.
  Its steps only hand the counts over. When that connection applies it too, it is staged
  inside the apply transaction, into temporary tables (`temp_staging`).
* A big one is `staging_jobs` Spark jobs, each over consecutive tables (about equal
  bytes). While PostgreSQL applies one job's tables (one backend, one core), the executors
  stage the next job's, on the other cores. The apply transaction reads a staging table
  once its job has committed it: in READ COMMITTED each statement sees what was committed
  before it began. Fewer jobs cost less (each costs the Spark JVM a fixed share of CPU);
  more let the apply start sooner.
"""

from __future__ import annotations

import threading
import time
import uuid
import zlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import partial

import psycopg
import structlog
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException, PythonException
from pyspark.sql import SparkSession

from protocol.schema import Table
from replica_store.errors import LoadFailedError, TransientLoadError
from replica_store.layout import Datamart
from replica_store.staged_streams import forget_staged_streams, staged_streams
from replica_store.store import empty_staging
from replica_store.store_sql import copy_statement
from replica_store.transfer import StagedTransfer
from spark_loader.settings import LoaderSettings
from spark_loader.slice_encode import EncodedSlice, TableSlice
from spark_loader.slice_jobs import StagingTarget, plan_tasks, stage_slices
from spark_loader.temp_staging import (
    chunk_entries,
    is_small,
    stage_in_apply_transaction,
    stage_small,
)

#: One table's staging: (staged, received) rows.
StagingStep = Callable[[], tuple[int, int]]


@dataclass(frozen=True)
class Staging:
    """A load's staging: one step per table, in table order, and where each table's rows
    are (quoted): its staging table, or the session's temporary one (`temp_staging`)."""

    steps: list[StagingStep]
    relations: dict[str, str]


def staging_steps(
    conn: psycopg.Connection,
    datamart: Datamart,
    transfer: StagedTransfer,
    tables: list[Table],
    settings: LoaderSettings,
    spark: Callable[[], SparkSession],
    executor_dsn: Callable[[], str],
    *,
    in_apply_transaction: bool = False,
    ahead: Mapping[TableSlice, EncodedSlice] | None = None,
    read_by_open_apply: Collection[str] = (),
) -> Staging:
    """One step per table of `tables`, in that order (`spark`: the session, asked for only
    when a Spark job is needed). A table whose staging already holds this transfer's
    stream (`staged_streams`) only hands its counts over; the others' staging is emptied, then
    staged. `in_apply_transaction`: the caller applies on `conn`, so a small delta with no
    stream prestaged is staged at once in the transaction it opens there (`temp_staging`),
    with the slices `ahead` holds already encoded (`decode_ahead`). `read_by_open_apply`:
    tables whose staging an open apply's transaction has read (`OpenApply.touched`)."""
    ready = staged_streams(conn, transfer.manifest, datamart.staging)
    to_stage = [t for t in tables if t.name not in ready]
    chunks = chunk_entries(datamart, transfer, to_stage)
    if in_apply_transaction and not ready and is_small(chunks, settings):
        counts, relations = stage_in_apply_transaction(
            conn, datamart, transfer, tables, chunks, settings, ahead
        )
        return Staging([partial(_given, counts[t.name]) for t in tables], relations)
    forget_staged_streams(conn, datamart.name, [t.name for t in to_stage])
    deleting = {datamart.staging(name) for name in read_by_open_apply}
    steps = iter(
        _staging(
            conn, datamart, transfer, to_stage, chunks, settings, spark, executor_dsn, deleting
        )
    )
    return Staging(
        [partial(_given, ready[t.name]) if t.name in ready else next(steps) for t in tables],
        {t.name: datamart.staging(t.name) for t in tables},
    )


def _staging(
    conn: psycopg.Connection,
    datamart: Datamart,
    transfer: StagedTransfer,
    tables: list[Table],
    chunks: dict[str, list[tuple[int, int, str, int]]],
    settings: LoaderSettings,
    spark_session: Callable[[], SparkSession],
    executor_dsn: Callable[[], str],
    deleting: Collection[str] = (),
) -> list[StagingStep]:
    """Empty the tables' staging (`deleting`: those to empty by DELETE), then one step
    per table of `tables`, in that order (`chunks`: theirs, `chunk_entries`)."""
    if not tables:  # every table was prestaged
        return []
    staging = {t.name: datamart.staging(t.name) for t in tables}
    empty_staging(conn, list(staging.values()), deleting=deleting)
    targets = {
        datamart.position(t.name): StagingTarget(
            staging[t.name],
            copy_statement(staging[t.name], t),
            zlib.crc32(staging[t.name].encode()) - 2**31,  # an int4 lock key
        )
        for t in tables
    }
    if is_small(chunks, settings):
        at_once = stage_small(conn, datamart, transfer, tables, chunks, targets, settings)
        return [partial(_given, at_once[t.name]) for t in tables]
    slice_bytes = int(settings.max_slice_mib * 2**20)
    limits, body_format = settings.body_limits(), transfer.manifest.body_format

    groups = table_groups(
        [sum(e[3] for e in chunks[t.name]) for t in tables], settings.staging_jobs
    )
    spark = spark_session()
    parallelism = spark.sparkContext.defaultParallelism
    counts: dict[int, tuple[int, int]] = {}

    def job(group: int) -> None:
        members = [t for t, g in zip(tables, groups, strict=True) if g == group]
        # The first job has every core; later ones leave one to the apply running beside.
        width = parallelism if group == 0 else max(1, parallelism - 1)
        tasks = plan_tasks([e for t in members for e in chunks[t.name]], width, slice_bytes)
        positions = [datamart.position(t.name) for t in members]
        deadline = JobDeadline(spark, settings.spark_job_timeout_seconds)
        try:
            with deadline:
                counts.update(
                    stage_slices(
                        spark,
                        datamart.schema.tables,
                        tasks,
                        executor_dsn(),
                        {p: targets[p] for p in positions},
                        limits,
                        settings.fault_fail_first_task_attempt,
                        body_format,
                    )
                )
        except (PythonException, Py4JJavaError, PySparkException) as exc:
            if deadline.expired:
                raise TransientLoadError(
                    f"a staging job ran past {settings.spark_job_timeout_seconds:g} s "
                    "(PODD_SPARK_JOB_TIMEOUT_SECONDS) and was cancelled"
                ) from None
            if isinstance(exc, PythonException | Py4JJavaError):  # failed in the executors
                raise _spark_job_failed(exc) from None
            # refused on the driver: set-up, not load, trouble
            raise LoadFailedError(f"Spark refused the load: {exc}") from None

    def step(index: int) -> tuple[int, int]:
        if index == 0 or groups[index] != groups[index - 1]:
            job(groups[index])
        return counts.get(datamart.position(tables[index].name), (0, 0))

    return [partial(step, i) for i in range(len(tables))]


def table_groups(sizes: list[int], jobs: int) -> list[int]:
    """The Spark job (0, 1, …) of each table, tables in order: at most `jobs` jobs of
    consecutive tables, each about an equal share of the bytes."""
    total = sum(sizes) or 1
    out: list[int] = []
    before = 0
    for size in sizes:
        out.append(min(jobs - 1, before * jobs // total))
        before += size
    return out


def logged_when_done(
    step: StagingStep, bound: structlog.typing.FilteringBoundLogger, started: float
) -> StagingStep:
    """The last staging step of a load, logging step 3 (`staged`) as it ends."""

    def logged() -> tuple[int, int]:
        result = step()
        bound.info("staged", step=3, seconds=round(time.perf_counter() - started, 3))
        return result

    return logged


def _given(counts: tuple[int, int]) -> tuple[int, int]:
    """A step whose staging is already done."""
    return counts


class JobDeadline:
    """The Spark jobs started in this thread inside `with` are cancelled (their tasks
    interrupted) once `seconds` have passed; `expired` says whether that happened."""

    def __init__(self, spark: SparkSession, seconds: float) -> None:
        self.context = spark.sparkContext
        self.group = f"podd-staging-{uuid.uuid4().hex}"
        self.expired = False
        self._timer = threading.Timer(seconds, self._cancel)
        self._timer.daemon = True

    def _cancel(self) -> None:
        self.expired = True
        self.context.cancelJobGroup(self.group)

    def __enter__(self) -> JobDeadline:
        self.context.setJobGroup(self.group, "podd: staging", interruptOnCancel=True)
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _spark_job_failed(exc: Exception) -> TransientLoadError:
    """A failed Spark job: row errors came back as data (`stage_slices`), so this is an
    executor or environment fault, worth another attempt."""
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return TransientLoadError(f"the Spark job failed: {first_line[:500]}")
