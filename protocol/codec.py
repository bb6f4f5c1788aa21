"""Encoding and decoding of the protocol's one-record messages.

Control values (`delta.rq`, `delta.rs`, `delta.in.rs`) and `delta.in` keys are Avro OCFs
holding exactly one record, writer schema in the header. Reading resolves the writer schema
against ours by the Avro rules (fields may be added later with defaults); anything that
cannot be read is a `MessageDecodeError`: such a message cannot be answered.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any, Literal, TypeVar

import fastavro
from pydantic import ValidationError

from protocol.avro_schemas import parsed_schema
from protocol.errors import MessageDecodeError
from protocol.messages import DeltaInKey, WireModel

Codec = Literal["null", "deflate"]
#: The first bytes of every Avro Object Container File (fastavro does not check them).
OCF_MAGIC = b"Obj\x01"
M = TypeVar("M", bound=WireModel)


def write_ocf(schema: Any, records: Iterable[dict[str, Any]], codec: str = "null") -> bytes:
    """An OCF of `records` under the parsed `schema`."""
    buf = io.BytesIO()
    fastavro.writer(buf, schema, records, codec=codec)
    return buf.getvalue()


def read_single_record(data: bytes | None, schema_name: str) -> dict[str, Any]:
    """The one record of an OCF, resolved against the shipped schema `schema_name`."""
    if not data:
        raise MessageDecodeError(f"{schema_name}: empty message")
    if not data.startswith(OCF_MAGIC):
        raise MessageDecodeError(f"{schema_name}: not an Avro container (bad magic {data[:4]!r})")
    try:
        records = list(fastavro.reader(io.BytesIO(data), reader_schema=parsed_schema(schema_name)))
    except Exception as exc:  # fastavro raises many types on bad input
        raise MessageDecodeError(f"{schema_name}: not a readable Avro container: {exc}") from None
    if len(records) != 1:
        raise MessageDecodeError(f"{schema_name}: holds {len(records)} records, expected 1")
    record = records[0]
    if not isinstance(record, dict):
        raise MessageDecodeError(f"{schema_name}: the record is not a record")
    return record


def encode_message(message: WireModel, codec: Codec = "null") -> bytes:
    """A message as an OCF with exactly one record."""
    schema = parsed_schema(type(message).avro_name)
    return write_ocf(schema, [message.to_avro_record()], codec)


def decode_message(cls: type[M], data: bytes | None) -> M:
    """Read one message of type `cls`; `MessageDecodeError` if it cannot be read."""
    record = read_single_record(data, cls.avro_name)
    try:
        return cls.from_avro_record(record)
    except ValidationError as exc:
        raise MessageDecodeError(f"{cls.avro_name}: invalid record: {exc}") from None


def encode_delta_in_key(key: DeltaInKey, codec: Codec = "null") -> bytes:
    return encode_message(key, codec)


def decode_delta_in_key(data: bytes | None) -> DeltaInKey:
    return decode_message(DeltaInKey, data)


def encode_datamart_key(datamart: str) -> bytes:
    """The key of control messages: the datamart name as UTF-8."""
    return datamart.encode("utf-8")
