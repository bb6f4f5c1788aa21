"""Encoding and decoding of the protocol's one-record messages.

Control values (`delta.rq`, `delta.rs`, `delta.in.rs`) and `delta.in` keys are Avro OCFs
holding exactly one record, writer schema in the header. Reading resolves the writer schema
against ours by the Avro rules (fields may be added later with defaults); anything that
cannot be read is a `MessageDecodeError`: such a message cannot be answered. A message is
read within `MESSAGE_LIMITS` (`protocol.ocf`): at most 64 KiB in all, decompressed, and only
the `null` and `deflate` codecs, so a compression bomb in a key is refused, not inflated.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Iterable
from typing import Any, Literal, TypeVar

import fastavro
from pydantic import ValidationError

from protocol.avro_schemas import parsed_schema, schema_json
from protocol.errors import MessageDecodeError
from protocol.messages import DeltaInKey, WireModel
from protocol.ocf import ContainerError, OcfLimits, iter_blocks, read_header

Codec = Literal["null", "deflate", "snappy", "zstandard"]
#: The most bytes a key or control message may take, as sent and decompressed.
MAX_MESSAGE_BYTES = 64 * 1024
MESSAGE_LIMITS = OcfLimits.small(MAX_MESSAGE_BYTES)
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
    if len(data) > MAX_MESSAGE_BYTES:
        raise MessageDecodeError(f"{schema_name}: {len(data)} bytes, more than {MAX_MESSAGE_BYTES}")
    try:
        header = read_header(data, MESSAGE_LIMITS)
        blocks = [b for b in iter_blocks(data, header, MESSAGE_LIMITS) if b.count]
    except ContainerError as exc:
        raise MessageDecodeError(f"{schema_name}: {exc}") from None
    count = sum(b.count for b in blocks)
    if count != 1:
        raise MessageDecodeError(f"{schema_name}: holds {count} records, expected 1")
    try:
        writer = _writer_schema(header.schema_text, schema_name)
        record = fastavro.schemaless_reader(
            io.BytesIO(blocks[0].payload), writer, parsed_schema(schema_name)
        )
    except MessageDecodeError:
        raise
    except Exception as exc:  # fastavro raises many types on bad input
        raise MessageDecodeError(f"{schema_name}: not a readable Avro record: {exc}") from None
    if not isinstance(record, dict):
        raise MessageDecodeError(f"{schema_name}: the record is not a record")
    return record


@functools.lru_cache(maxsize=256)
def _writer_schema(schema_text: str, schema_name: str) -> Any:
    """A message's writer schema, parsed and checked against the contract's
    (`logical_type_mismatch`: `MessageDecodeError`). Each distinct text once: every key
    and control message of one writer carries the same header, and parsing it was most of
    a key's decoding; a flood of distinct texts only turns the bounded cache over."""
    writer_json = json.loads(schema_text)
    different = logical_type_mismatch(writer_json, schema_json(schema_name))
    if different is not None:
        raise MessageDecodeError(f"{schema_name}: {different}")
    return fastavro.parse_schema(as_reader_named(writer_json, schema_name))


def logical_type_mismatch(writer: Any, reader: Any, path: str = "") -> str | None:
    """Where the writer's schema gives a field another logical type than the contract's
    (None: nowhere). Such a value decodes "right" here, by the writer's own logical type,
    while a reader that applies the contract's schema, as Java's Avro does, reads another
    value: a `deltaDate` written as `timestamp-millis` is read as microseconds, in 1970.
    A plain type without a logical type is read as the contract says, and accepted."""
    if isinstance(reader, list) or isinstance(writer, list):
        for wanted in _branches(reader):  # unions: each branch against the writer's of its kind
            for given in _branches(writer):
                if _base(given) == _base(wanted):
                    found = logical_type_mismatch(given, wanted, path)
                    if found is not None:
                        return found
        return None
    kind = _base(reader)
    if kind != _base(writer) or not isinstance(reader, dict):
        return None  # another kind: resolution decides
    if kind == "record":
        theirs = {f.get("name"): f.get("type") for f in writer.get("fields", ())}
        for field in reader.get("fields", ()):
            name = field["name"]
            if name in theirs:
                found = logical_type_mismatch(theirs[name], field["type"], f"{path}{name}.")
                if found is not None:
                    return found
        return None
    if kind == "array":
        return logical_type_mismatch(writer.get("items"), reader.get("items"), path)
    given = writer.get("logicalType") if isinstance(writer, dict) else None
    wanted = reader.get("logicalType")
    if given is not None and given != wanted:
        return (
            f"field {path.rstrip('.')} is written as {given}, the contract's is "
            f"{wanted or kind}: a reader of the contract would read another value"
        )
    return None


def _branches(schema: Any) -> list[Any]:
    return schema if isinstance(schema, list) else [schema]


def _base(schema: Any) -> Any:
    return schema.get("type") if isinstance(schema, dict) else schema


def as_reader_named(writer_schema: Any, schema_name: str) -> Any:
    """The writer's top-level record under the reader's name: fields resolve by the Avro
    rules, but record names and namespaces are never compared (Prostore's backup writer
    names its key record `topicA`, its rows `row`)."""
    if isinstance(writer_schema, dict) and writer_schema.get("type") == "record":
        reader = schema_json(schema_name)
        renamed = {k: v for k, v in writer_schema.items() if k not in ("namespace", "aliases")}
        renamed["name"] = f"{reader.get('namespace', '')}.{reader['name']}".lstrip(".")
        return renamed
    return writer_schema


def read_records_of(
    data: bytes | None, schema_name: str, limits: OcfLimits, max_records: int
) -> list[dict[str, Any]]:
    """Every record of an OCF (at most `max_records`, within `limits`), resolved against the
    shipped schema `schema_name`; `MessageDecodeError` if it cannot be read."""
    if not data:
        return []
    try:
        header = read_header(data, limits)
        writer = fastavro.parse_schema(as_reader_named(json.loads(header.schema_text), schema_name))
        reader = parsed_schema(schema_name)
        records: list[dict[str, Any]] = []
        for block in iter_blocks(data, header, limits):
            if len(records) + block.count > max_records:
                raise MessageDecodeError(f"{schema_name}: more than {max_records} records")
            payload = io.BytesIO(block.payload)
            for _ in range(block.count):
                record = fastavro.schemaless_reader(payload, writer, reader)
                if not isinstance(record, dict):
                    raise MessageDecodeError(f"{schema_name}: a record is not a record")
                records.append(record)
    except MessageDecodeError:
        raise
    except Exception as exc:  # ContainerError, bad JSON, fastavro's many error types
        raise MessageDecodeError(f"{schema_name}: not readable Avro records: {exc}") from None
    return records


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
