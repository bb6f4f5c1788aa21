"""Synthetic deltas for the loader benchmarks: N sales-shaped tables, staged on disk.

Delta 0 pre-loads `preload` rows; delta 1 has `rows` rows: 70% inserts of new keys, 20%
updates and 10% deletes of pre-loaded keys (as the issues' benchmarks ask).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from podd_runtime.files import durable_write
from protocol.body_writer import encode_body
from protocol.chunk_files import ChunkFile
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema
from replica_store.transfer import (
    StagedTransfer,
    StreamManifest,
    TransferManifest,
)

_START = datetime(2024, 1, 1)


def bench_schema(datamart: str, tables: int) -> LogicalSchema:
    ddl = "\n".join(
        f"""CREATE TABLE {datamart}.t{i} (
          id bigint not null, transaction_date timestamp not null,
          product_code varchar(256) not null, product_units bigint not null,
          store_id bigint not null, description varchar(256),
          PRIMARY KEY (id)) DISTRIBUTED BY (id);"""
        for i in range(tables)
    )
    return parse_schema(ddl)


def _row(rng: random.Random, key: int, op: int) -> tuple[Any, ...]:
    return (
        key,
        _START + timedelta(seconds=rng.randrange(10**8)),
        f"PRD-{rng.randrange(100_000):06d}",
        rng.randrange(1, 1000),
        rng.randrange(1, 500),
        None if rng.random() < 0.1 else f"sold via channel {rng.randrange(50)}",
        op,
    )


def delta_rows(table_index: int, delta: int, rows: int, existing: int) -> list[tuple[Any, ...]]:
    """A table's rows: all inserts for delta 0; else 70/20/10 over `existing` keys."""
    rng = random.Random(f"{table_index}:{delta}")
    if delta == 0 or existing == 0:
        return [_row(rng, k, 0) for k in range(rows)]
    out = []
    next_key = existing
    for _ in range(rows):
        draw = rng.random()
        if draw < 0.7:
            out.append(_row(rng, next_key, 0))
            next_key += 1
        else:
            out.append(_row(rng, rng.randrange(existing), 0 if draw < 0.9 else 1))
    return out


def stage_rows(
    root: Path,
    schema: LogicalSchema,
    delta: int,
    rows_per_table: Iterable[list[tuple[Any, ...]]],
    chunk_rows: int,
) -> StagedTransfer:
    """Stage delta `delta` (dated 2026-01-01 + `delta` hours) with the given rows, one list
    per table in schema order (a generator keeps one table's rows in memory at a time)."""
    request_id = str(uuid.uuid4())
    directory = root / f"{schema.datamart}-{delta}-{request_id}"
    directory.mkdir(parents=True)
    streams = []
    for index, (table, data) in enumerate(zip(schema.tables, rows_per_table, strict=True)):
        parts = [data[i : i + chunk_rows] for i in range(0, len(data), chunk_rows)] or [[]]
        for number, part in enumerate(parts, start=1):
            body = encode_body(table, part, codec="deflate")
            durable_write(directory / ChunkFile(index + 1, number).name, body)
        streams.append(
            StreamManifest(stream_number=index + 1, table_name=table.name, chunk_count=len(parts))
        )
    manifest = TransferManifest(
        datamart=schema.datamart,
        delta_num=delta,
        delta_date=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=delta),
        request_id=request_id,
        streams=tuple(streams),
    )
    return StagedTransfer.write(directory, manifest)


def stage_delta(
    root: Path, schema: LogicalSchema, delta: int, rows: int, existing: int, chunk_rows: int
) -> StagedTransfer:
    """Stage delta `delta` of `rows` rows spread over the tables, as the agent would."""
    per_table = rows // len(schema.tables)
    existing_per_table = existing // len(schema.tables)
    generated = (
        delta_rows(index, delta, per_table, existing_per_table)
        for index in range(len(schema.tables))
    )
    return stage_rows(root, schema, delta, generated, chunk_rows)
