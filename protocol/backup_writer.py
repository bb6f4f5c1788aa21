"""Writing BACKUP_TO_KAFKA messages the way Prostore's DTM Tools write them (BACKUP.md).

Used by `tools.write_backup` and the tests: keys are a record named `topicA` whose
`deltaDate` is a plain long with the logical type on the field; row bodies are records named
`row` whose every field (`sys_op` too) is a `["null", T]` union with `"doc": ""`, timestamps,
dates and times as plain long/int; changelog bodies hold `ChangelogRecord`s.

An increment is laid out over `threads` writer streams: the changelog first, then each
table's chunks of `chunk_rows` rows, dealt round-robin to the streams; each stream numbers
its chunks from 1 and flags its last. Messages go round-robin to `partitions` partitions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any

import fastavro

from protocol.apply_model import DeltaRow
from protocol.avro_schemas import parsed_schema
from protocol.backup import ChangelogRecord
from protocol.body import SYS_OP
from protocol.codec import Codec, write_ocf
from protocol.messages import to_micros
from protocol.schema import Table
from protocol.types import TypeKind

KEY_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "topicA",
    "fields": [
        {"name": "incrementId", "type": "string"},
        {"name": "messageType", "type": "long"},
        {"name": "datamart", "type": "string"},
        {"name": "deltaNum", "type": "long"},
        {"name": "deltaDate", "type": "long", "logicalType": "timestamp-micros"},
        {"name": "tableName", "type": ["null", "string"]},
        {"name": "streamNumber", "type": "long"},
        {"name": "streamTotal", "type": "long"},
        {"name": "chunkNumber", "type": "long"},
        {"name": "isLastChunk", "type": "boolean"},
    ],
}
_KEY = fastavro.parse_schema(KEY_SCHEMA)
_EPOCH_DAY = date(1970, 1, 1)


def backup_body_schema(table: Table) -> dict[str, Any]:
    fields = [
        {"name": f"c{i}", "type": ["null", column.type.avro.primitive], "doc": ""}
        for i, column in enumerate(table.columns)
    ]
    fields.append({"name": SYS_OP, "type": ["null", "int"], "doc": ""})
    return {"type": "record", "name": "row", "fields": fields}


def _physical(kind: TypeKind, value: Any) -> Any:
    if value is None:
        return None
    if kind is TypeKind.TIMESTAMP and isinstance(value, datetime):
        return to_micros(value)
    if kind is TypeKind.DATE and isinstance(value, date):
        return (value - _EPOCH_DAY).days
    if kind is TypeKind.TIME and isinstance(value, time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + (
            value.microsecond
        )
    return value


def encode_backup_body(table: Table, rows: Sequence[DeltaRow], codec: Codec = "null") -> bytes:
    schema = backup_body_schema(table)
    names = [f["name"] for f in schema["fields"]]
    kinds = [c.type.kind for c in table.columns]
    records = (
        dict(
            zip(
                names,
                [*(_physical(k, v) for k, v in zip(kinds, row.values, strict=True)), row.sys_op],
                strict=True,
            )
        )
        for row in rows
    )
    return write_ocf(fastavro.parse_schema(schema), records, codec)


def encode_changelog(records: Sequence[ChangelogRecord]) -> bytes:
    return write_ocf(parsed_schema("ChangelogRecord"), [r.to_avro_record() for r in records])


@dataclass(frozen=True)
class BackupMessage:
    key: bytes
    value: bytes
    partition: int
    table_name: str | None  # None: a changelog message


def increment_messages(
    *,
    increment_id: str,
    datamart: str,
    delta_num: int,
    delta_date: datetime,
    changelog: Sequence[ChangelogRecord],
    rows: Mapping[Table, Sequence[DeltaRow]],
    threads: int = 1,
    partitions: int = 1,
    chunk_rows: int = 1000,
    codec: Codec = "null",
) -> list[BackupMessage]:
    """Every message of one increment, in the order a writer would send them."""
    bodies: list[tuple[str | None, bytes]] = [(None, encode_changelog(changelog))]
    for table, table_rows in rows.items():
        for start in range(0, len(table_rows), chunk_rows):
            part = table_rows[start : start + chunk_rows]
            bodies.append((table.name, encode_backup_body(table, part, codec)))
    streams = max(1, min(threads, len(bodies)))
    dealt: list[list[tuple[str | None, bytes]]] = [[] for _ in range(streams)]
    for i, body in enumerate(bodies):
        dealt[i % streams].append(body)
    out: list[BackupMessage] = []
    sequence = 0
    for stream, bodies_of_stream in enumerate(dealt, 1):
        for chunk, (table_name, value) in enumerate(bodies_of_stream, 1):
            key = encode_backup_key(
                increment_id=increment_id,
                datamart=datamart,
                delta_num=delta_num,
                delta_date=delta_date,
                table_name=table_name,
                stream_number=stream,
                stream_total=streams,
                chunk_number=chunk,
                is_last_chunk=chunk == len(bodies_of_stream),
            )
            out.append(BackupMessage(key, value, sequence % partitions, table_name))
            sequence += 1
    return out


def encode_backup_key(
    *,
    increment_id: str,
    datamart: str,
    delta_num: int,
    delta_date: datetime,
    table_name: str | None,
    stream_number: int,
    stream_total: int,
    chunk_number: int,
    is_last_chunk: bool,
) -> bytes:
    """A key as Prostore writes it (`messageType` 1 when `table_name` is None)."""
    record = {
        "incrementId": increment_id,
        "messageType": 1 if table_name is None else 0,
        "datamart": datamart,
        "deltaNum": delta_num,
        "deltaDate": to_micros(delta_date),
        "tableName": table_name,
        "streamNumber": stream_number,
        "streamTotal": stream_total,
        "chunkNumber": chunk_number,
        "isLastChunk": is_last_chunk,
    }
    return write_ocf(_KEY, [record])
