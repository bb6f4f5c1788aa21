"""Deltas for the end-to-end benchmark, encoded once, on disk, before any clock starts.

A prepared delta is a staged-transfer directory (one Avro body per stream and chunk, and a
manifest) written by `bench.datagen`; `delta_in_messages` turns it into the `delta.in`
messages an origin would produce, reading one body at a time, so a 5M-row delta never sits
in the benchmark's memory.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.datagen import bench_schema, delta_rows, stage_delta, stage_rows
from protocol.codec import encode_delta_in_key
from protocol.messages import DeltaInKey
from protocol.schema import LogicalSchema
from replica_store.transfer import StagedTransfer

SUBSCRIPTION = "SELECT * FROM bench"


@dataclass(frozen=True)
class PreparedDelta:
    directory: Path
    rows: int

    @property
    def transfer(self) -> StagedTransfer:
        return StagedTransfer.open(self.directory)


def delta_in_messages(delta: PreparedDelta) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of every chunk, stream by stream, in chunk order."""
    for stream in delta.transfer.manifest.streams:
        yield from stream_messages(delta, stream.stream_number)


def stream_messages(delta: PreparedDelta, stream_number: int) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of one stream's chunks, in chunk order."""
    transfer = delta.transfer
    m = transfer.manifest
    stream = next(s for s in m.streams if s.stream_number == stream_number)
    for number, path in transfer.chunks_of(stream.table_name):
        key = DeltaInKey(
            request_id=m.request_id,
            datamart=m.datamart,
            delta_num=m.delta_num,
            delta_date=m.delta_date,
            subscription=SUBSCRIPTION,
            table_name=stream.table_name,
            stream_number=stream.stream_number,
            stream_total=len(m.streams),
            chunk_number=number,
            is_last_chunk=number == stream.chunk_count,
        )
        yield encode_delta_in_key(key), path.read_bytes()


def _prepare(
    root: Path, datamart: str, tables: int, delta: int, rows: int, existing: int, chunk_rows: int
) -> PreparedDelta:
    schema = bench_schema(datamart, tables)
    staged = stage_delta(root, schema, delta, rows, existing, chunk_rows)
    return PreparedDelta(staged.directory, rows - rows % tables)


def prepare_deltas(
    root: Path, datamart: str, tables: int, sizes: list[tuple[int, int, int]], chunk_rows: int
) -> list[PreparedDelta]:
    """(delta, rows, existing rows) each, generated in child processes (not timed)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        futures = [
            pool.submit(_prepare, root, datamart, tables, d, rows, existing, chunk_rows)
            for d, rows, existing in sizes
        ]
        return [f.result() for f in futures]


def prepare_one_row_deltas(
    root: Path, schema: LogicalSchema, first: int, count: int
) -> list[PreparedDelta]:
    """Deltas `first..first+count-1`: one new row in the first table, the others empty."""
    out = []
    for delta in range(first, first + count):
        _, *values, _ = delta_rows(0, delta, 1, 0)[0]
        row = (delta, *values, 0)  # a new key per delta: an insert
        rows = [[row] if index == 0 else [] for index in range(len(schema.tables))]
        staged = stage_rows(root, schema, delta, rows, chunk_rows=1)
        out.append(PreparedDelta(staged.directory, 1))
    return out
