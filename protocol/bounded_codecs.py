"""Decompression with a bound on the output: a bomb is refused, never inflated in full.

Used for Avro container blocks (`protocol.ocf`: deflate, snappy, zstandard) and for Kafka
record batches (`podd_kafka.batch_guard`: gzip, snappy, lz4, zstd). Each function either
returns the decompressed bytes (at most `budget` of them) or raises `CodecError`; `measure`
returns only how many bytes a payload decompresses to, holding about one piece at a time.

Where a format states its decompressed size up front (snappy's length prefix, an LZ4
frame's block sizes), that size is checked before anything is allocated; where it does not
(deflate, gzip, a zstd frame without a content size), output is produced in pieces and the
work stops one piece past the budget.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator

import cramjam
import zstandard

#: The most output held at once while measuring or streaming a decompression.
PIECE = 1024 * 1024


class CodecError(ValueError):
    """Bytes that do not decompress within the budget (the text says why)."""


def _too_big(budget: int) -> CodecError:
    return CodecError(f"decompresses to more than {budget} bytes")


# -- deflate and gzip (zlib) -------------------------------------------------------------


def _zlib_pieces(raw: bytes, wbits: int, budget: int) -> Iterator[bytes]:
    """Pieces of a zlib stream's output; CodecError past `budget`, on corruption or a cut."""
    inflater = zlib.decompressobj(wbits)
    size = 0
    tail = raw
    try:
        while True:
            out = inflater.decompress(tail, PIECE)
            size += len(out)
            if size > budget:
                raise _too_big(budget)
            if out:
                yield out
            if inflater.eof:
                if wbits > 16 and inflater.unused_data:  # gzip: another member follows
                    tail = inflater.unused_data
                    inflater = zlib.decompressobj(wbits)
                    continue
                return
            if not out and len(inflater.unconsumed_tail) == len(tail):
                raise CodecError("the compressed data is truncated")
            tail = inflater.unconsumed_tail
    except zlib.error as exc:
        raise CodecError(f"corrupt compressed data: {exc}") from None


# -- snappy ------------------------------------------------------------------------------


def _snappy_claim(raw: bytes) -> int:
    """The decompressed size a raw snappy block states in its varint prefix."""
    result = shift = 0
    for pos in range(min(len(raw), 5)):
        byte = raw[pos]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        shift += 7
    raise CodecError("a snappy block has no valid length prefix")


def snappy_raw(raw: bytes, budget: int) -> bytes:
    """A raw snappy block (no framing)."""
    claim = _snappy_claim(raw)
    if claim > budget:
        raise _too_big(budget)
    try:
        out = bytes(cramjam.snappy.decompress_raw(raw))
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise CodecError(f"corrupt snappy data: {exc}") from None
    if len(out) != claim:
        raise CodecError("a snappy block does not hold the size it states")
    return out


_XERIAL = b"\x82SNAPPY\x00"


def _xerial_blocks(raw: bytes) -> Iterator[bytes]:
    """The raw snappy blocks of Kafka's xerial framing (a 16-byte header, then
    length-prefixed blocks)."""
    pos = 16
    if len(raw) < pos:
        raise CodecError("a snappy (xerial) header is truncated")
    while pos < len(raw):
        if pos + 4 > len(raw):
            raise CodecError("a snappy (xerial) block length is truncated")
        (size,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        if size < 0 or pos + size > len(raw):
            raise CodecError(f"a snappy (xerial) block of {size} bytes does not fit")
        yield raw[pos : pos + size]
        pos += size


def kafka_snappy(raw: bytes, budget: int) -> bytes:
    """Kafka's snappy: xerial-framed (the Java client) or one raw block."""
    if not raw.startswith(_XERIAL):
        return snappy_raw(raw, budget)
    claims = [(_snappy_claim(block), block) for block in _xerial_blocks(raw)]
    if sum(claim for claim, _ in claims) > budget:
        raise _too_big(budget)
    return b"".join(snappy_raw(block, budget) for _, block in claims)


def avro_snappy(raw: bytes, budget: int) -> bytes:
    """Avro's snappy block: a raw snappy block, then the big-endian CRC32 of its output."""
    if len(raw) < 4:
        raise CodecError("a snappy block is shorter than its checksum")
    out = snappy_raw(raw[:-4], budget)
    if struct.unpack(">I", raw[-4:])[0] != zlib.crc32(out):
        raise CodecError("a snappy block fails its CRC32 check")
    return out


# -- zstd --------------------------------------------------------------------------------


#: The most a zstd block decompresses to per byte of input (a 4-byte RLE block makes 128 KiB).
_ZSTD_MAX_RATIO = 32 * 1024


def _zstd_pieces(raw: bytes, budget: int) -> Iterator[bytes]:
    """A zstd stream's output. Input is fed in slices small enough that one call cannot
    make more than the budget left (zstd offers no output limit per call)."""
    size = pos = 0
    frame = zstandard.ZstdDecompressor().decompressobj()
    try:
        while pos < len(raw):
            step = max(4, (budget - size) // _ZSTD_MAX_RATIO + 1)
            out = frame.decompress(raw[pos : pos + step])
            pos += step
            size += len(out)
            if size > budget:
                raise _too_big(budget)
            if out:
                yield out
            if frame.eof and (frame.unused_data or pos < len(raw)):  # another frame follows
                raw, pos = frame.unused_data + raw[pos:], 0
                frame = zstandard.ZstdDecompressor().decompressobj()
    except zstandard.ZstdError as exc:
        raise CodecError(f"corrupt zstd data: {exc}") from None
    if not frame.eof:
        raise CodecError("the zstd data is truncated")


# -- lz4 (Kafka's LZ4 frames) ------------------------------------------------------------

_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def _lz4_bound(raw: bytes) -> tuple[int, int]:
    """The most bytes an LZ4 frame can decompress to (its blocks times the block size it
    declares: only the last may be shorter), and that block size. Walks block headers only."""
    if len(raw) < 7 or struct.unpack_from("<I", raw)[0] != _LZ4_MAGIC:
        raise CodecError("not an LZ4 frame")
    flags, bd = raw[4], raw[5]
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x7)
    if block_max is None:
        raise CodecError("an LZ4 frame declares no valid block size")
    pos = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0) + 1
    block_checksum = 4 if flags & 0x10 else 0
    blocks = 0
    while True:
        if pos + 4 > len(raw):
            raise CodecError("an LZ4 frame is truncated")
        (word,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        if word == 0:
            return blocks * block_max, block_max
        size = word & 0x7FFFFFFF
        if size > block_max:
            raise CodecError("an LZ4 block is larger than its frame allows")
        pos += size + block_checksum
        blocks += 1


def kafka_lz4(raw: bytes, budget: int) -> bytes:
    # The bound, not the content size a frame may declare (a declaration can lie). It is
    # within one block of the truth, so at most one block past the budget is ever made.
    bound, block_max = _lz4_bound(raw)
    if bound - block_max >= budget:
        raise _too_big(budget)
    try:
        out = bytes(cramjam.lz4.decompress(raw))
    except Exception as exc:
        raise CodecError(f"corrupt lz4 data: {exc}") from None
    if len(out) > budget:
        raise _too_big(budget)
    return out


# -- one entry point per use -------------------------------------------------------------

Decompressor = Callable[[bytes, int], bytes]


def raw_deflate(raw: bytes, budget: int) -> bytes:
    return b"".join(_zlib_pieces(raw, -15, budget))


def gzip(raw: bytes, budget: int) -> bytes:
    return b"".join(_zlib_pieces(raw, 31, budget))


def zstd(raw: bytes, budget: int) -> bytes:
    return b"".join(_zstd_pieces(raw, budget))


def measure(name: str, raw: bytes, budget: int) -> int:
    """How many bytes `raw` decompresses to under codec `name` (an Avro or Kafka codec
    name), checked as `decompress` checks it, holding about one piece at a time."""
    if name in ("deflate", "gzip"):
        return sum(len(p) for p in _zlib_pieces(raw, -15 if name == "deflate" else 31, budget))
    if name in ("zstandard", "zstd"):
        return sum(len(p) for p in _zstd_pieces(raw, budget))
    return len(decompress(name, raw, budget))


def check_size(name: str, raw: bytes, budget: int) -> None:
    """CodecError unless `raw` decompresses within `budget`, checked the cheapest sound way:
    the sizes snappy blocks state (the decoder allocates exactly those), an LZ4 frame's block
    count, and for the others a bounded decompression whose output is dropped piece by piece.
    """
    if name == "kafka-snappy":
        blocks = list(_xerial_blocks(raw)) if raw.startswith(_XERIAL) else [raw]
        if sum(_snappy_claim(block) for block in blocks) > budget:
            raise _too_big(budget)
    elif name == "lz4":
        bound, block_max = _lz4_bound(raw)
        if bound - block_max >= budget:
            raise _too_big(budget)
    else:
        measure(name, raw, budget)


DECOMPRESSORS: dict[str, Decompressor] = {
    "deflate": raw_deflate,  # Avro
    "snappy": avro_snappy,  # Avro
    "zstandard": zstd,  # Avro
    "gzip": gzip,  # Kafka
    "kafka-snappy": kafka_snappy,
    "lz4": kafka_lz4,  # Kafka
    "zstd": zstd,  # Kafka
}


def decompress(name: str, raw: bytes, budget: int) -> bytes:
    """`raw` decompressed under codec `name`, at most `budget` bytes; CodecError otherwise."""
    decompressor = DECOMPRESSORS.get(name)
    if decompressor is None:
        raise CodecError(f"no codec {name!r}")
    return decompressor(raw, budget)
