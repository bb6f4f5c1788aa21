"""Framing a delta as `delta.in` messages, the way an origin sends it (PROTOCOL.md).

One stream per table of the schema, numbered 1..streamTotal in schema order; chunks numbered
from 1 with `chunk_rows` rows each; the last chunk flagged. A table without changes still
sends one empty chunk flagged last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from protocol.apply_model import DeltaRow
from protocol.body_writer import encode_body
from protocol.codec import Codec
from protocol.messages import DeltaInKey
from protocol.schema import LogicalSchema, Table


@dataclass(frozen=True)
class Chunk:
    key: DeltaInKey
    body: bytes
    rows: int


#: The codec of the chunks an origin frames, from rows (`frame_delta`) or from records it
#: wrote itself (`frame_bodies`).
CHUNK_CODEC: Codec = "deflate"


def frame_delta(
    schema: LogicalSchema,
    *,
    request_id: str,
    delta_num: int,
    delta_date: datetime,
    rows_by_table: Mapping[str, Sequence[DeltaRow]],
    chunk_rows: int = 1000,
    codec: Codec = CHUNK_CODEC,
) -> Iterator[Chunk]:
    """The chunks of one transfer, stream by stream, in chunk order."""
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be at least 1")

    def bodies(table: Table) -> list[tuple[bytes, int]]:
        rows = rows_by_table.get(table.name, ())
        slices = [rows[i : i + chunk_rows] for i in range(0, len(rows), chunk_rows)] or [[]]
        return [
            (encode_body(table, [(*r.values, r.sys_op) for r in part], codec=codec), len(part))
            for part in slices
        ]

    return frame_bodies(
        schema, request_id=request_id, delta_num=delta_num, delta_date=delta_date, bodies=bodies
    )


def frame_bodies(
    schema: LogicalSchema,
    *,
    request_id: str,
    delta_num: int,
    delta_date: datetime,
    bodies: Callable[[Table], Sequence[tuple[bytes, int]]],
) -> Iterator[Chunk]:
    """The chunks of one transfer whose bodies are written already: `bodies(table)`, each
    with its row count, in chunk order (at least one a table), asked for stream by stream."""
    tables = list(schema)
    for stream_number, table in enumerate(tables, start=1):
        written = bodies(table)
        for chunk_number, (body, rows) in enumerate(written, start=1):
            key = DeltaInKey(
                request_id=request_id,
                datamart=schema.datamart,
                delta_num=delta_num,
                delta_date=delta_date,
                subscription=f"SELECT * FROM {schema.datamart}.{table.name}",
                table_name=table.name,
                stream_number=stream_number,
                stream_total=len(tables),
                chunk_number=chunk_number,
                is_last_chunk=chunk_number == len(written),
            )
            yield Chunk(key, body, rows)
