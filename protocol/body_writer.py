"""Writing `delta.in` bodies for a logical table, the way Prostore's upload writes them.

Used by the origin driver, the conformance harness and the tests. By default every field is
a `["null", T]` union with "null" first, strings carry `"avro.java.string": "String"`, and
`sys_op` is an int with `"default": 0` — Prostore's own upload-schema style.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import fastavro
import numpy as np

from protocol.avro_encoder import container, fast_body, records_of, table_kinds
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
    nullable = [isinstance(f["type"], list) for f in schema["fields"][:-1]]
    fast = fast_body(table, rows, schema, codec, nullable)
    if fast is not None:
        return fast
    return fastavro_body(table, rows, schema, codec)


def fastavro_body(
    table: Table, rows: Sequence[Sequence[Any]], schema: dict[str, Any], codec: str
) -> bytes:
    """The body written by fastavro: any value fastavro takes, and its error for a bad one."""
    names = [f["name"] for f in schema["fields"]]
    width = len(names)
    stamps = [i for i, c in enumerate(table.columns) if c.type.avro.logical == "timestamp-micros"]

    def records() -> Iterable[dict[str, Any]]:
        for row in rows:
            if len(row) != width:
                raise ValueError(f"row has {len(row)} values, table {table.name} needs {width}")
            values = list(row)
            for i in stamps:
                if isinstance(values[i], datetime):
                    values[i] = _micros(values[i])
            yield dict(zip(names, values, strict=True))

    return write_ocf(fastavro.parse_schema(schema), records(), codec)


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
    """Rows held as columns (`protocol.avro_encoder.encode_records`' layout: `sys_op` the
    last column, a float as its Avro bits) as bodies of up to `chunk_rows` rows each, with
    their row counts: one empty body where there are none. The records are written once;
    a body is a range of them."""
    schema = body_schema(table)
    nullable = np.array([isinstance(f["type"], list) for f in schema["fields"]], np.bool_)
    records, ends = records_of(table_kinds(table), nullable, values, lengths, valid, strings)
    count = len(ends)
    bodies = []
    for first in range(0, count, chunk_rows) if count else [0]:
        last = min(first + chunk_rows, count)
        start = int(ends[first - 1]) if first else 0
        body = container(schema, codec, records[start:], ends[first:last] - start)
        bodies.append((body, last - first))
    return bodies
