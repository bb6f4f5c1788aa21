"""A delta's slices for the ADQM store, table after table, decoded in this process or by
Spark tasks, each table's end marked (`TableEnd`) so it can be published while the next
one decodes (`AdqmLoader`).

In this process (the default up to `clickhouse_in_driver_max_mib` of chunk files), slices
decode one at a time: the Avro decoder and the embedded ClickHouse both run without the
GIL, so a table decodes while the one before it is published. Above that, Spark tasks
decode waves of slices (twice the default parallelism at once) and hand each back as Arrow
IPC: at most a wave is held in this process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from protocol.body import BodyFormat
from protocol.ocf import OcfLimits
from protocol.schema import Table
from replica_store.layout import Datamart
from replica_store.transfer import StagedTransfer
from spark_loader.settings import LoaderSettings
from spark_loader.slice_arrow import (
    ArrowRefusal,
    ArrowSlice,
    from_ipc,
    raise_refusal,
    slice_or_refusal,
    to_ipc,
)
from spark_loader.slice_encode import TableSlice
from spark_loader.slice_jobs import plan_tasks
from spark_loader.temp_staging import chunk_entries


@dataclass(frozen=True)
class TableEnd:
    """Every slice of the table (its position in the schema) came before this."""

    table: int


def delta_slices(
    datamart: Datamart,
    transfer: StagedTransfer,
    tables: Sequence[Table],
    settings: LoaderSettings,
    spark: Callable[[], SparkSession],
) -> Iterator[ArrowSlice | TableEnd]:
    """Each table's slices (those with chunks), in schema order, then its `TableEnd`."""
    chunks = chunk_entries(datamart, transfer, tables)
    entries = [e for table_entries in chunks.values() for e in table_entries]
    if not entries:
        return
    size = sum(size for *_, size in entries)
    limits, body_format = settings.body_limits(), transfer.manifest.body_format
    schema_tables = list(datamart.schema.tables)
    max_slice = int(settings.max_slice_mib * 2**20)
    in_driver = size <= settings.clickhouse_in_driver_max_mib * 2**20
    session = None if in_driver else spark()
    parallelism = 1 if session is None else max(1, session.sparkContext.defaultParallelism)
    slices = sorted(
        (s for task in plan_tasks(entries, parallelism, max_slice) for s in task.slices),
        key=lambda s: (s.table, s.slice),
    )
    if session is None:
        decoded: Iterator[ArrowSlice | ArrowRefusal] = (
            slice_or_refusal(s, schema_tables, limits, body_format) for s in slices
        )
    else:
        decoded = _by_spark(session, slices, schema_tables, limits, body_format, parallelism)
    current: int | None = None
    for result in decoded:
        if isinstance(result, ArrowRefusal):
            raise_refusal(result, schema_tables)
        assert isinstance(result, ArrowSlice)
        if current is not None and result.table != current:
            yield TableEnd(current)
        current = result.table
        yield result
    if current is not None:
        yield TableEnd(current)


def _by_spark(
    session: SparkSession,
    slices: list[TableSlice],
    tables: list[Table],
    limits: OcfLimits,
    body_format: BodyFormat,
    parallelism: int,
) -> Iterator[ArrowSlice | ArrowRefusal]:
    wave = 2 * parallelism
    for start in range(0, len(slices), wave):
        part = slices[start : start + wave]
        job = session.sparkContext.parallelize(part, len(part)).map(
            lambda s: to_ipc(slice_or_refusal(s, tables, limits, body_format))
        )
        for item in job.collect():
            yield from_ipc(item)
