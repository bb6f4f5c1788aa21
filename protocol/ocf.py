"""Avro Object Container Files, read with bounds: nothing a container claims sizes memory.

    header   "Obj\\x01", a map<bytes> of metadata (avro.schema, avro.codec), a 16-byte sync
    blocks   a record count (long), a byte size (long), the (compressed) data, the sync

Every message this project reads from Kafka is such a container, and any of them may be
hostile. So the header has a size limit, only the codecs in `ALLOWED_CODECS` are read, and
each block is decompressed with a limit on its output (`protocol.bounded_codecs`; per
block, and for the container in all): a compression bomb is refused after at most the
limit, never inflated in full. Sizes and counts are checked against the bytes actually
present before anything is allocated. Errors are `ContainerError`; callers turn them into
their own protocol errors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from protocol import bounded_codecs
from protocol.bounded_codecs import CodecError

OCF_MAGIC = b"Obj\x01"
SYNC_SIZE = 16
#: The codecs read here: the two every reader must accept (PROTOCOL.md), and the two other
#: codecs of the Avro specification that the Java and Python writers offer.
ALLOWED_CODECS = ("null", "deflate", "snappy", "zstandard")
MiB = 2**20


class ContainerError(ValueError):
    """Bytes that are not a container this reader accepts (the text says why)."""


@dataclass(frozen=True)
class OcfLimits:
    """Most bytes a header may take and a block / the whole container may decompress to."""

    max_header_bytes: int = 256 * 1024
    max_block_bytes: int = 64 * MiB
    max_total_bytes: int = 256 * MiB

    @classmethod
    def small(cls, size: int) -> OcfLimits:
        """Limits for a one-record message of at most `size` bytes in all."""
        return cls(max_header_bytes=size, max_block_bytes=size, max_total_bytes=size)


@dataclass(frozen=True)
class OcfHeader:
    schema_text: str
    codec: str
    sync: bytes
    data_start: int  # where the first block begins


@dataclass(frozen=True)
class OcfBlock:
    count: int
    payload: bytes  # decompressed


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint long at `pos`; (value, next position)."""
    result = shift = 0
    for _ in range(10):
        if pos >= len(data):
            raise ContainerError("the container ends inside a number")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise ContainerError("a number is longer than 10 bytes")


def _read_bytes(data: bytes, pos: int, limit: int) -> tuple[bytes, int]:
    size, pos = _read_long(data, pos)
    if size < 0 or pos + size > min(len(data), limit):
        raise ContainerError(f"a header field of {size} bytes does not fit the header")
    return data[pos : pos + size], pos + size


def read_header(data: bytes, limits: OcfLimits) -> OcfHeader:
    """The header; `ContainerError` if it is not one, too large, or names another codec."""
    if not data.startswith(OCF_MAGIC):
        raise ContainerError(f"not an Avro container (bad magic {bytes(data[:4])!r})")
    limit = min(len(data), limits.max_header_bytes)
    pos = len(OCF_MAGIC)
    metadata: dict[str, bytes] = {}
    while True:
        count, pos = _read_long(data, pos)
        if count == 0:
            break
        if count < 0:
            count = -count
            _, pos = _read_long(data, pos)  # the block's byte size, not needed
        for _ in range(count):
            key, pos = _read_bytes(data, pos, limit)
            value, pos = _read_bytes(data, pos, limit)
            metadata[key.decode("utf-8", "replace")] = value
    if pos + SYNC_SIZE > limit:
        raise ContainerError(f"the header is larger than {limits.max_header_bytes} bytes")
    codec = metadata.get("avro.codec", b"null").decode("utf-8", "replace") or "null"
    if codec not in ALLOWED_CODECS:
        raise ContainerError(f"codec {codec[:40]!r} is not accepted ({', '.join(ALLOWED_CODECS)})")
    schema = metadata.get("avro.schema")
    if schema is None:
        raise ContainerError("the header holds no schema")
    try:
        schema_text = schema.decode("utf-8")
    except UnicodeDecodeError:
        raise ContainerError("the header's schema is not UTF-8") from None
    return OcfHeader(schema_text, codec, data[pos : pos + SYNC_SIZE], pos + SYNC_SIZE)


def _decompressed(codec: str, raw: bytes, budget: int) -> bytes:
    if codec == "null":
        if len(raw) > budget:
            raise ContainerError(f"a block holds more than {budget} bytes")
        return raw
    try:
        return bounded_codecs.decompress(codec, raw, budget)
    except CodecError as exc:
        raise ContainerError(f"a {codec} block {exc}") from None


def _decompressed_size(codec: str, raw: bytes, budget: int) -> int:
    if codec == "null":
        return len(_decompressed(codec, raw, budget))
    try:
        return bounded_codecs.measure(codec, raw, budget)
    except CodecError as exc:
        raise ContainerError(f"a {codec} block {exc}") from None


def _block_spans(data: bytes, header: OcfHeader) -> Iterator[tuple[int, int, int]]:
    """Each block's record count and where its bytes start and end, checked for framing."""
    pos = header.data_start
    while pos < len(data):
        count, pos = _read_long(data, pos)
        size, pos = _read_long(data, pos)
        if count < 0 or size < 0:
            raise ContainerError(f"a block claims {count} records in {size} bytes")
        end = pos + size
        if end + SYNC_SIZE > len(data):
            raise ContainerError(f"a block of {size} bytes does not fit the container")
        if data[end : end + SYNC_SIZE] != header.sync:
            raise ContainerError("a block does not end with the header's sync marker")
        yield count, pos, end
        pos = end + SYNC_SIZE


def iter_blocks(data: bytes, header: OcfHeader, limits: OcfLimits) -> Iterator[OcfBlock]:
    """The container's blocks, decompressed within the limits, in order."""
    total = 0
    for count, start, end in _block_spans(data, header):
        budget = min(limits.max_block_bytes, limits.max_total_bytes - total)
        payload = _decompressed(header.codec, data[start:end], budget)
        total += len(payload)
        yield OcfBlock(count, payload)


def decoded_size(data: bytes, limits: OcfLimits) -> int:
    """The bytes a container's blocks decompress to, checking every block on the way (as
    `iter_blocks` does), without holding a whole block where the codec can avoid it."""
    header = read_header(data, limits)
    total = 0
    for _, start, end in _block_spans(data, header):
        budget = min(limits.max_block_bytes, limits.max_total_bytes - total)
        total += _decompressed_size(header.codec, data[start:end], budget)
    return total


def content_digest(data: bytes | None, limits: OcfLimits) -> bytes:
    """A SHA-256 of a container's content (its schema, codec and each block's record count
    and bytes) without its sync marker, which every writer draws at random: the same rows
    written by the same writer twice give one digest. Anything that is no container is
    digested whole. Nothing is decompressed."""
    digest = hashlib.sha256()
    raw = data or b""
    try:
        header = read_header(raw, limits)
        spans = list(_block_spans(raw, header))
    except ContainerError:
        digest.update(b"raw\x00" + raw)
        return digest.digest()
    digest.update(header.schema_text.encode() + b"\x00" + header.codec.encode())
    for count, start, end in spans:
        digest.update(count.to_bytes(8, "big", signed=True) + (end - start).to_bytes(8, "big"))
        digest.update(raw[start:end])
    return digest.digest()
