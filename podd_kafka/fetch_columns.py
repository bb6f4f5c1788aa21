"""A fetch answer's records (one partition's bytes) read into `RecordColumns` in one pass.

aiokafka reads a fetch a batch at a time, and its record batches are small: a producer's
default batch is 16 KiB, about twenty 700-byte CDC messages, so what a batch costs in Python
(its objects, its CRC call, a kernel call) is paid every twenty records. `fetch_pieces` frames
every batch of the fetch in one kernel call (`record_kernel.frame_batches`), checks the CRC of
each (`google_crc32c`, the CPU's instruction), and reads the records of every plain batch (v2,
not compressed, not a control batch, its CRC right) in one kernel call per `most` records
(`record_kernel.read_batches`), across batches. A batch that is not plain is handed to the
caller's `other` (the batch guard reads it as it reads every batch: decompressed within its
bound by `batch_columns`, a control batch skipped, an older format through aiokafka, a bad CRC
refused). A plain batch with a record that cannot be read is handed to `refused` after the
records before it, and reading goes on at the next batch.

Each piece comes with the offset a reader stands at after it, as aiokafka moves its fetch
position: past a batch's last offset where the piece ends the batch, else past the piece's
last record.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

import google_crc32c
import numpy as np

from podd_kafka import record_kernel as kernel
from podd_kafka.record_columns import RecordColumns, RecordError, first_bad_key
from protocol.bounded_codecs import CodecError, decompress

#: Kafka's batch codecs by the attribute bits, as `protocol.bounded_codecs` names them.
CODECS = {1: "gzip", 2: "kafka-snappy", 3: "lz4", 4: "zstd"}
#: Where a v2 batch's records start (after its header; the CRC covers the attributes on).
RECORDS_AT = kernel.HEADER_SIZE
#: Batches framed at a time (80 bytes each): a fetch of many tiny batches is framed in turns.
FRAMES_AT_ONCE = 1024

#: What `fetch_pieces` yields: a piece of records (None: none, the position only moves),
#: and the offset a reader stands at after it.
Piece = tuple[Sequence[Any] | None, int]


def v2_crc_matches(data: Any, start: int, end: int) -> bool:
    """Whether the v2 batch `data[start:end]` (bytes or a uint8 array) holds the CRC-32C of
    everything after its CRC field."""
    (stored,) = struct.unpack_from(">I", data, start + kernel.CRC_AT)
    return bool(google_crc32c.value(data[start + kernel.ATTRIBUTES_AT : end]) == stored)


def fetch_pieces(
    data: Any,
    most: int,
    check_crcs: bool,
    other: Callable[[int, int], Iterator[Piece]],
    refused: Callable[[int, int, str], None],
) -> Generator[Piece, None, int]:
    """The records of the fetch bytes `data` (a uint8 array), in pieces of at most `most`,
    each with the position after it (see the module). Returns where the batches framed end:
    what is left there is a batch cut short, or one aiokafka refuses to frame."""
    frames = np.empty((FRAMES_AT_ONCE, kernel.FRAME_COLUMNS), np.int64)
    at = 0
    while True:
        count, after_frames = kernel.frame_batches(data, at, frames)
        if not count:
            return at
        framed = frames[:count]
        plain = _plain(data, framed, check_crcs)
        yield from _framed_pieces(data, framed, plain, most, other, refused)
        at = after_frames


def _plain(data: Any, framed: Any, check_crcs: bool) -> Any:
    """Which batches the kernel reads: v2 with the whole header, no codec, no control flag,
    and (`check_crcs`) their CRC right."""
    k = kernel
    attributes = framed[:, k.F_ATTRIBUTES]
    plain = (
        (framed[:, k.F_MAGIC] == 2)
        & (framed[:, k.F_END] - framed[:, k.F_START] >= k.HEADER_SIZE)
        & (attributes & k.CODEC_MASK == 0)
        & (attributes & k.CONTROL == 0)
    )
    if check_crcs:
        for b in np.nonzero(plain)[0].tolist():
            plain[b] = v2_crc_matches(data, int(framed[b, k.F_START]), int(framed[b, k.F_END]))
    return plain


def _next_offset(frame: Any) -> int:
    return int(frame[kernel.F_BASE] + frame[kernel.F_LAST_DELTA] + 1)


def _room(framed: Any, b: int, at: int, left: int, most: int) -> int:
    """Lines for the records the batches from `b` on say they hold (`left` of batch `b`
    where reading is inside it), at most `most`: a piece of a few records holds no more."""
    counts = framed[b + 1 if at >= 0 else b :, kernel.F_COUNT]
    return max(1, min(most, (left if at >= 0 else 0) + int(counts.clip(0, most).sum())))


def _framed_pieces(
    data: Any,
    framed: Any,
    plain: Any,
    most: int,
    other: Callable[[int, int], Iterator[Piece]],
    refused: Callable[[int, int, str], None],
) -> Iterator[Piece]:
    k = kernel
    b, at, left = 0, -1, 0
    while b < len(framed):
        if at < 0 and not plain[b]:
            yield from other(int(framed[b, k.F_START]), int(framed[b, k.F_END]))
            b += 1
            continue
        lines = np.empty((_room(framed, b, at, left, most), k.COLUMNS), np.int64)
        read, b, at, left, problem = k.read_batches(data, framed, plain, b, at, left, lines)
        piece = RecordColumns(data, lines[:read])
        bad = first_bad_key(piece)
        if bad is not None:  # that record's batch is refused, and the batches after it read again
            b = int(np.searchsorted(framed[:, k.F_START], piece.lines[bad, k.R_HEADERS0])) - 1
            piece, at, problem = piece[:bad], 0, k.BAD_KEY
        if at < 0:  # stopped at a batch's start: the batch before it was read to its end
            yield (piece if len(piece) else None), _next_offset(framed[b - 1])
        elif len(piece):
            yield piece, int(piece.offsets()[-1]) + 1
        if problem != k.OK:
            refused(int(framed[b, k.F_START]), int(framed[b, k.F_END]), k.PROBLEMS[problem])
            yield None, _next_offset(framed[b])
            b, at, left = b + 1, -1, 0


def batch_columns(
    data: Any, start: int, end: int, most: int, max_decoded: int
) -> Iterator[RecordColumns]:
    """The records of the one v2 batch `data[start:end]` (a uint8 array), in pieces of at
    most `most`; a compressed batch decompressed to at most `max_decoded` bytes first.
    Raises `RecordError` after the pieces it could read."""
    if end - start < RECORDS_AT:
        raise RecordError(f"a v2 batch of {end - start} bytes is shorter than its header")
    frames = np.empty((1, kernel.FRAME_COLUMNS), np.int64)
    kernel.frame_batches(data[start:end], 0, frames)  # the one batch, whole
    records, at = data[start:end], RECORDS_AT
    codec = int(frames[0, kernel.F_ATTRIBUTES]) & kernel.CODEC_MASK
    if codec:
        name = CODECS.get(codec)
        if name is None:
            raise RecordError(f"compression codec {codec} is not a Kafka codec")
        try:
            inflated = decompress(name, data[start + RECORDS_AT : end].tobytes(), max_decoded)
        except CodecError as exc:
            raise RecordError(f"{name.removeprefix('kafka-')}: {exc}") from exc
        records, at = np.frombuffer(inflated, np.uint8), 0
        frames[0, kernel.F_END] = len(inflated)
    left = int(frames[0, kernel.F_COUNT])
    none = np.zeros(1, np.bool_)  # the batch is read from `at`, and no batch after it
    while True:
        lines = np.empty((max(1, min(left, most)), kernel.COLUMNS), np.int64)
        read, _, at, left, problem = kernel.read_batches(records, frames, none, 0, at, left, lines)
        piece = RecordColumns(records, lines[:read])
        bad = first_bad_key(piece)
        if bad is not None:
            if bad:
                yield piece[:bad]
            raise RecordError("a header key is not UTF-8")
        if read:
            yield piece
        if problem != kernel.OK:
            raise RecordError(kernel.PROBLEMS[problem])
        if at < 0:
            return
