"""A table slice decoded to Arrow rows (the ADQM store's staging takes Arrow, not COPY
tuples): the same reading as `slice_encode.encode_slice` (chunks in order, the slice's
share of the keys, the last row per key), run by a Spark task or by the driver. A task
hands its slice back as Arrow IPC bytes, one slice at a time: the driver is the store's one
writer (an embedded ClickHouse takes one process), and holds one slice at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from protocol.body import BodyFormat
from protocol.errors import ErrorCode, ProtocolError, error_for
from protocol.ocf import OcfLimits
from protocol.schema import Table
from spark_loader.slice_encode import ChunkRefused, TableSlice, slice_batches


@dataclass(frozen=True)
class ArrowSlice:
    """A slice's rows to stage (last per key), and how many rows its chunks carried."""

    table: int
    rows: pa.Table | None
    received: int


@dataclass(frozen=True)
class ArrowRefusal:
    """A slice the protocol refuses: its code crosses back from an executor as data."""

    table: int
    code: ErrorCode
    message: str
    chunk: int | None


def arrow_slice(
    task: TableSlice, tables: Sequence[Table], limits: OcfLimits, body_format: BodyFormat
) -> ArrowSlice:
    """Decode, filter, keep the last row per key. `ChunkRefused` names a refused chunk."""
    table = tables[task.table]
    keys: list[pa.Array] = []
    batches: list[pa.RecordBatch] = []
    received = 0
    for key, batch in slice_batches(task, table, limits, body_format):
        received += batch.num_rows
        if batch.num_rows:
            keys.append(key)
            batches.append(batch)
    if not batches:
        return ArrowSlice(task.table, None, received)
    rows = pa.Table.from_batches(batches)
    index = pa.table({"k": pa.chunked_array(keys, pa.binary()), "i": pa.array(range(len(rows)))})
    winners = index.group_by("k", use_threads=False).aggregate([("i", "max")])
    keep = pc.sort_indices(winners.column("i_max"))
    return ArrowSlice(task.table, rows.take(winners.column("i_max").take(keep)), received)


def slice_or_refusal(
    task: TableSlice, tables: Sequence[Table], limits: OcfLimits, body_format: BodyFormat
) -> ArrowSlice | ArrowRefusal:
    try:
        return arrow_slice(task, tables, limits, body_format)
    except ChunkRefused as exc:
        return ArrowRefusal(task.table, exc.error.code, str(exc.error), exc.chunk)
    except ProtocolError as exc:
        return ArrowRefusal(task.table, exc.code, str(exc), None)


def raise_refusal(refusal: ArrowRefusal, tables: Sequence[Table]) -> None:
    error = error_for(refusal.code, refusal.message)
    if refusal.chunk is not None:
        error.chunk = (tables[refusal.table].name, refusal.chunk)
    raise error


def to_ipc(result: ArrowSlice | ArrowRefusal) -> bytes | ArrowRefusal | tuple[int, int]:
    """What a Spark task returns: Arrow IPC bytes of the rows, a refusal, or (table,
    received) for a slice with no rows."""
    if isinstance(result, ArrowRefusal):
        return result
    if result.rows is None:
        return (result.table, result.received)
    sink = pa.BufferOutputStream()
    schema = result.rows.schema.with_metadata(
        {b"table": str(result.table).encode(), b"received": str(result.received).encode()}
    )
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(result.rows.replace_schema_metadata(schema.metadata))
    data: bytes = sink.getvalue().to_pybytes()
    return data


def from_ipc(item: bytes | ArrowRefusal | tuple[int, int]) -> ArrowSlice | ArrowRefusal:
    if isinstance(item, ArrowRefusal):
        return item
    if isinstance(item, tuple):
        return ArrowSlice(item[0], None, item[1])
    rows = pa.ipc.open_stream(item).read_all()
    metadata = rows.schema.metadata or {}
    return ArrowSlice(
        int(metadata[b"table"]), rows.replace_schema_metadata(None), int(metadata[b"received"])
    )
