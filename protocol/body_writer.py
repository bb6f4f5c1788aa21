"""Writing `delta.in` bodies for a logical table, the way Prostore's upload writes them.

Used by the origin driver, the conformance harness and the tests. By default every field is
a `["null", T]` union with "null" first, strings carry `"avro.java.string": "String"`, and
`sys_op` is an int with `"default": 0` — Prostore's own upload-schema style.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import fastavro
import numpy as np

from protocol.avro_encoder import container, fast_body, fast_records, records_of, table_kinds
from protocol.body import SYS_OP
from protocol.codec import Codec, write_ocf
from protocol.schema import Table

_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _field_name(name: str, position: int) -> str:
    # Names are never compared by the reader; an invalid Avro name gets a positional one.
    return name if _AVRO_NAME.match(name) else f"c{position}"


_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def _micros(value: datetime) -> int:
    """A timestamp's microseconds since the epoch; a naive one is read as UTC, whatever the
    machine's zone (fastavro would read it as local time, and take 3x longer)."""
    return (value - (_EPOCH if value.tzinfo is None else _EPOCH_UTC)) // _MICRO


def body_schema(table: Table, *, all_nullable: bool = True) -> dict[str, Any]:
    """The writer schema of a body for `table`.

    `all_nullable=False` writes NOT NULL columns as plain types, like a strict writer.
    """
    fields: list[dict[str, Any]] = []
    for position, column in enumerate(table.columns):
        shape = column.type.avro.to_avro()
        if column.type.is_string:
            shape = {"type": "string", "avro.java.string": "String"}
        avro_type: Any = ["null", shape] if (all_nullable or column.nullable) else shape
        field: dict[str, Any] = {"name": _field_name(column.name, position), "type": avro_type}
        if isinstance(avro_type, list):
            field["default"] = None
        fields.append(field)
    fields.append({"name": SYS_OP, "type": "int", "default": 0})
    return {"type": "record", "name": _field_name(table.name, 0), "fields": fields}


def encode_body(
    table: Table,
    rows: Iterable[Sequence[Any]],
    *,
    codec: Codec = "null",
    all_nullable: bool = True,
) -> bytes:
    """A body OCF for `rows`: each row is the column values in order, then `sys_op`.

    Values are Python's own (bool, int, float, str, date, time, datetime) or the Avro
    encodings' integers for date (days), time and timestamp (microseconds). Plain values take
    the compiled writer (`protocol.avro_encoder`); the rest, fastavro.
    """
    rows = rows if isinstance(rows, list) else list(rows)
    schema = body_schema(table, all_nullable=all_nullable)
    fast = fast_body(table, rows, schema, codec, _nullable(schema)[:-1].tolist())
    if fast is not None:
        return fast
    return fastavro_body(table, rows, schema, codec)


def fastavro_body(
    table: Table, rows: Sequence[Sequence[Any]], schema: dict[str, Any], codec: str
) -> bytes:
    """The body written by fastavro: any value fastavro takes, and its error for a bad one."""
    return write_ocf(fastavro.parse_schema(schema), _dicts(table, rows, schema), codec)


def _dicts(
    table: Table, rows: Sequence[Sequence[Any]], schema: dict[str, Any]
) -> Iterable[dict[str, Any]]:
    """`rows` as the records fastavro writes (a timestamp as its microseconds)."""
    names = [f["name"] for f in schema["fields"]]
    width = len(names)
    stamps = [i for i, c in enumerate(table.columns) if c.type.avro.logical == "timestamp-micros"]
    for row in rows:
        if len(row) != width:
            raise ValueError(f"row has {len(row)} values, table {table.name} needs {width}")
        values = list(row)
        for i in stamps:
            if isinstance(values[i], datetime):
                values[i] = _micros(values[i])
        yield dict(zip(names, values, strict=True))


def row_records(table: Table, rows: Sequence[Sequence[Any]]) -> bytes:
    """The Avro records of `rows` (each its values, then `sys_op`) under the table's body
    schema, as a body holds them before its codec: the bytes `column_records` writes for the
    same rows held as columns."""
    schema = body_schema(table)
    found = fast_records(table, rows, _nullable(schema)[:-1].tolist())
    if found is not None:
        records, ends = found
        return bytes(records[: ends[-1]].tobytes())
    parsed, out = fastavro.parse_schema(schema), io.BytesIO()
    for record in _dicts(table, rows, schema):
        fastavro.schemaless_writer(out, parsed, record)
    return out.getvalue()


def _nullable(schema: dict[str, Any]) -> Any:
    """Whether each field of a body schema (`sys_op` last) takes a null."""
    return np.array([isinstance(f["type"], list) for f in schema["fields"]], np.bool_)


def column_records(
    table: Table, values: Any, lengths: Any, valid: Any, strings: Any
) -> tuple[Any, Any]:
    """Rows held as columns (`protocol.avro_encoder.encode_records`' layout: `sys_op` the
    last column, a float as its Avro bits) as records, and where each ends."""
    nullable = _nullable(body_schema(table))
    return records_of(table_kinds(table), nullable, values, lengths, valid, strings)


def record_bodies(
    table: Table, records: Any, ends: Any, *, chunk_rows: int, codec: Codec = "null"
) -> list[tuple[bytes, int]]:
    """Records written already (`column_records`) as bodies of up to `chunk_rows` records
    each, with their counts: one empty body where there are none."""
    schema = body_schema(table)
    count = len(ends)
    bodies = []
    for first in range(0, count, chunk_rows) if count else [0]:
        last = min(first + chunk_rows, count)
        start = int(ends[first - 1]) if first else 0
        body = container(schema, codec, records[start:], ends[first:last] - start)
        bodies.append((body, last - first))
    return bodies


def column_bodies(
    table: Table,
    values: Any,
    lengths: Any,
    valid: Any,
    strings: Any,
    *,
    chunk_rows: int,
    codec: Codec = "null",
) -> list[tuple[bytes, int]]:
    """Rows held as columns as bodies of up to `chunk_rows` rows each (`record_bodies`)."""
    records, ends = column_records(table, values, lengths, valid, strings)
    return record_bodies(table, records, ends, chunk_rows=chunk_rows, codec=codec)
