"""Hand-built Avro containers, for bytes that no well-behaved writer produces (tests, chaos)."""

from __future__ import annotations

import io
import json
import zlib
from typing import Any, cast

import fastavro
from fastavro import schemaless_writer
from fastavro.read import HEADER_SCHEMA

from protocol.avro_encoder import avro_long

SYNC = b"0123456789abcdef"


zigzag = avro_long  # Avro's variable-length zigzag encoding of a long


def string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return zigzag(len(raw)) + raw


def header(schema: Any, codec: str = "null") -> bytes:
    buf = io.BytesIO()
    meta = {"avro.schema": json.dumps(schema).encode(), "avro.codec": codec.encode()}
    schemaless_writer(buf, HEADER_SCHEMA, {"magic": b"Obj\x01", "meta": meta, "sync": SYNC})
    return buf.getvalue()


def container(schema: Any, blocks: list[tuple[int, bytes]], codec: str = "null") -> bytes:
    """An OCF whose blocks hold exactly the given (record count, record bytes)."""
    out = bytearray(header(schema, codec))
    for count, records in blocks:
        payload = records
        if codec == "deflate":
            compressor = zlib.compressobj(wbits=-15)
            payload = compressor.compress(records) + compressor.flush()
        out += zigzag(count) + zigzag(len(payload)) + payload + SYNC
    return bytes(out)


def read_records(data: bytes) -> list[dict[str, Any]]:
    """fastavro's reading of an OCF of records (the oracle the tests compare with)."""
    records = list(fastavro.reader(io.BytesIO(data)))
    assert all(isinstance(r, dict) for r in records)
    return cast(list[dict[str, Any]], records)
