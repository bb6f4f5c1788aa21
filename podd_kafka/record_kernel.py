"""The records of a Kafka record batch (format v2) read into columns by a compiled kernel.

aiokafka reads a batch's records one at a time into Python objects: a record, its key and
value as `bytes`, a list of its headers. The CDC origin's batch readers then take the values
back out and join them into one buffer (`podd_cdc.qlik_batch.batch_arrays`): about 1.2 µs a
726-byte Qlik message went to that, more than half of what reading a topic cost it.
`read_records` reads the records of a batch's (decompressed) bytes into one line of
`COLUMNS` per record: its offset and timestamp, and where its key, value and headers are in
those bytes, which stay where they are.

It reads what aiokafka's batch reader (`aiokafka.record._crecords.default_records`) reads,
with the same rules, and stops at the first record that breaks one (a varint longer than ten
bytes, a length past the batch's end, a negative header count or header key
length, a record whose fields do not fill its stated length), with the records before it
read. Every index is checked against the bytes' end before it is read; aiokafka's reader
checks one byte before each varint and may read a longer one past it. A header key must be
UTF-8: the kernel marks a record whose header keys hold a byte past ASCII (`R_WIDE`), for the
caller to decode them (`podd_kafka.record_columns`).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from protocol import kernel_arrays
from protocol.kernel_arrays import pointer, unowned
from protocol.kernel_cache import defined_here, drop_if_sources_changed

#: A record's line: its offset, timestamp and timestamp type, key, value and headers (each a
#: start and an end in the bytes read, -1 and -1 for a null key or value), how many headers,
#: and whether a header key holds a byte past ASCII.
R_OFFSET, R_TIMESTAMP, R_TYPE, R_KEY0, R_KEY1, R_VALUE0, R_VALUE1 = 0, 1, 2, 3, 4, 5, 6
R_HEADERS0, R_HEADERS1, R_HEADER_COUNT, R_WIDE = 7, 8, 9, 10
COLUMNS = 11

#: A batch's frame in a fetch's bytes: where it starts and ends, its magic byte, and a v2
#: batch's header fields (`frame_batches`).
F_START, F_END, F_MAGIC, F_ATTRIBUTES, F_BASE, F_LAST_DELTA = 0, 1, 2, 3, 4, 5
F_FIRST_TIMESTAMP, F_MAX_TIMESTAMP, F_COUNT, F_CRC = 6, 7, 8, 9
FRAME_COLUMNS = 10
#: A v2 batch's header: its size, and where its fields are.
HEADER_SIZE = 61
_LENGTH_AT, MAGIC_AT, CRC_AT, ATTRIBUTES_AT, _LAST_DELTA_AT = 8, 16, 17, 21, 23
_FIRST_TIMESTAMP_AT, _MAX_TIMESTAMP_AT, _COUNT_AT = 27, 35, 57
#: The smallest batch length aiokafka's `MemoryRecords` takes (a v0 message's overhead).
MIN_LENGTH = 14
#: The attributes' bits: the codec's, the flag of a batch whose records' times are the log's,
#: and a control batch's flag.
CODEC_MASK, LOG_APPEND_TIME, CONTROL = 0x07, 0x08, 0x20

#: Why reading stopped: nothing wrong, or what the record read last broke (`BAD_KEY`: the
#: caller's finding, of a record the kernel marked `R_WIDE`).
OK, CUT, LONG_VARINT, BAD_HEADERS, BAD_SIZE, UNCONSUMED, BAD_KEY = 0, 1, 2, 3, 4, 5, 6
PROBLEMS = {
    CUT: "a record runs past the batch's end",
    LONG_VARINT: "a varint of more than ten bytes",
    BAD_HEADERS: "a negative header count or header key length",
    BAD_SIZE: "a record's fields do not fill its stated length",
    UNCONSUMED: "bytes left after the batch's records",
    BAD_KEY: "a header key is not UTF-8",
}


@numba.njit(cache=True, nogil=True)
def _big_endian(data: Any, at: int, size: int) -> int:
    """The signed big-endian integer of `size` bytes at `at`."""
    value = np.int64(0)
    for k in range(size):
        value = (value << np.int64(8)) | np.int64(data[at + k])
    shift = np.int64(64 - 8 * size)
    return int((value << shift) >> shift)


@numba.njit(cache=True, nogil=True)
def frame_batches(data: Any, at: int, frames: Any) -> tuple[int, int]:
    """The batches of a fetch's bytes `data` from `at` into `frames` (at most as many), as
    aiokafka's `MemoryRecords` splits them: each its 12 bytes of base offset and length and
    that many more. The fetch's last batch, cut short where the broker filled the answer,
    is not one; a length under `MIN_LENGTH` stops the framing (aiokafka refuses it). A v2
    batch's header fields are framed where the header fits in it. Returns the batches framed
    and where the next one starts."""
    end = data.shape[0]
    n = 0
    while n < frames.shape[0] and end - at >= 12:
        length = _big_endian(data, at + _LENGTH_AT, 4)
        if length < MIN_LENGTH or length > end - at - 12:
            break
        frame = frames[n]
        frame[F_START] = at
        frame[F_END] = at + 12 + length
        frame[F_MAGIC] = _big_endian(data, at + MAGIC_AT, 1)
        frame[F_BASE] = _big_endian(data, at, 8)
        if frame[F_MAGIC] == 2 and 12 + length >= HEADER_SIZE:
            frame[F_CRC] = _big_endian(data, at + CRC_AT, 4) & 0xFFFFFFFF
            frame[F_ATTRIBUTES] = _big_endian(data, at + ATTRIBUTES_AT, 2)
            frame[F_LAST_DELTA] = _big_endian(data, at + _LAST_DELTA_AT, 4)
            frame[F_FIRST_TIMESTAMP] = _big_endian(data, at + _FIRST_TIMESTAMP_AT, 8)
            frame[F_MAX_TIMESTAMP] = _big_endian(data, at + _MAX_TIMESTAMP_AT, 8)
            frame[F_COUNT] = _big_endian(data, at + _COUNT_AT, 4)
        else:
            frame[F_CRC] = frame[F_ATTRIBUTES] = frame[F_LAST_DELTA] = -1
            frame[F_FIRST_TIMESTAMP] = frame[F_MAX_TIMESTAMP] = frame[F_COUNT] = -1
        at += 12 + length
        n += 1
    return n, at


@numba.njit(cache=True, nogil=True)
def _varint(data: Any, at: int, end: int) -> tuple[int, int, int]:
    """The zigzag varint at `at`: its value, where it ends, and OK or why not (as aiokafka's
    `decode_varint64`: at most ten bytes, bits past 64 dropped)."""
    value = np.uint64(0)
    shift = np.uint64(0)
    while True:
        if at >= end:
            return 0, at, CUT
        byte = np.uint64(data[at])
        at += 1
        if byte & np.uint64(0x80):
            value |= (byte & np.uint64(0x7F)) << shift
            shift += np.uint64(7)
            if shift > np.uint64(63):
                return 0, at, LONG_VARINT
        else:
            value |= byte << shift
            break
    signed = np.int64(value >> np.uint64(1)) ^ -np.int64(value & np.uint64(1))
    return int(signed), at, OK


@numba.njit(cache=True, nogil=True)
def _bytes(data: Any, at: int, end: int, lines: Any, n: int, column: int) -> tuple[int, int]:
    """A nullable byte string's length and bytes at `at` into `lines[n, column:column + 2]`."""
    size, at, problem = _varint(data, at, end)
    if problem != OK:
        return at, problem
    if size < 0:  # null, as aiokafka (and Kafka's own client) read any negative length
        lines[n, column] = -1
        lines[n, column + 1] = -1
        return at, OK
    if size > end - at:
        return at, CUT
    lines[n, column] = at
    lines[n, column + 1] = at + size
    return at + size, OK


@numba.njit(cache=True, nogil=True)
def _headers(data: Any, at: int, end: int, lines: Any, n: int) -> tuple[int, int]:
    """A record's headers at `at`: where they are, how many, whether a key is past ASCII."""
    count, at, problem = _varint(data, at, end)
    if problem != OK:
        return at, problem
    if count < 0:
        return at, BAD_HEADERS
    lines[n, R_HEADERS0] = at
    lines[n, R_HEADER_COUNT] = count
    lines[n, R_WIDE] = 0
    for _ in range(count):
        size, at, problem = _varint(data, at, end)
        if problem != OK:
            return at, problem
        if size < 0:
            return at, BAD_HEADERS
        if size > end - at:
            return at, CUT
        for k in range(at, at + size):
            if data[k] >= 0x80:
                lines[n, R_WIDE] = 1
        at += size
        size, at, problem = _varint(data, at, end)
        if problem != OK:
            return at, problem
        if size > end - at:
            return at, CUT
        at += max(size, 0)  # a negative length: a null value
    lines[n, R_HEADERS1] = at
    return at, OK


@numba.njit(cache=True, nogil=True)
def _record(
    data: Any, at: int, end: int, lines: Any, n: int, frames: Any, k: int
) -> tuple[int, int]:
    """One record at `at` of batch `k` (its base offset and times) into `lines[n]`."""
    length, at, problem = _varint(data, at, end)
    if problem != OK:
        return at, problem
    start = at
    _, at, problem = _varint(data, at, end)  # the attributes: unused, as aiokafka's
    if problem != OK:
        return at, problem
    delta, at, problem = _varint(data, at, end)
    if problem != OK:
        return at, problem
    log_time = frames[k, F_ATTRIBUTES] & LOG_APPEND_TIME
    lines[n, R_TIMESTAMP] = (
        frames[k, F_MAX_TIMESTAMP] if log_time else frames[k, F_FIRST_TIMESTAMP] + delta
    )
    lines[n, R_TYPE] = 1 if log_time else 0
    delta, at, problem = _varint(data, at, end)
    if problem != OK:
        return at, problem
    lines[n, R_OFFSET] = frames[k, F_BASE] + delta
    at, problem = _bytes(data, at, end, lines, n, R_KEY0)
    if problem != OK:
        return at, problem
    at, problem = _bytes(data, at, end, lines, n, R_VALUE0)
    if problem != OK:
        return at, problem
    at, problem = _headers(data, at, end, lines, n)
    if problem != OK:
        return at, problem
    if at - start != length:
        return at, BAD_SIZE
    return at, OK


@numba.njit(cache=True, nogil=True)
def read_batches(
    data: Any, frames: Any, plain: Any, k: int, at: int, left: int, lines: Any
) -> tuple[int, int, int, int, int]:
    """Records of the batches `frames` of `data` into `lines`, until they are full, from
    batch `k`: from `at` with `left` of its records still to read, or from its first record
    where `at` is -1; then on across the next batches as long as they are `plain` (each
    batch's records from `frame[F_START] + HEADER_SIZE` to its end, decompressed where the
    caller did so). Returns the records read, the batch and place reading stopped at (-1:
    that batch's start) with the records left of it, and OK or why its next record could
    not be read. Every byte read is within the batch's frame."""
    return _read_batches(
        pointer(data), unowned(frames), frames.shape[0], plain, k, at, left, unowned(lines)
    )


@numba.njit(cache=True, nogil=True)
def _read_batches(
    data: Any, frames: Any, count: int, plain: Any, k: int, at: int, left: int, lines: Any
) -> tuple[int, int, int, int, int]:
    """`read_batches` on the arrays as its steps take them (`protocol.kernel_arrays`: the
    bytes as a pointer, read only below each batch's end)."""
    n = 0
    most = lines.shape[0]
    while k < count:
        if at < 0:
            if n == most or not plain[k]:
                break
            at, left = frames[k, F_START] + HEADER_SIZE, frames[k, F_COUNT]
        end = frames[k, F_END]
        while left > 0:
            if n == most:
                return n, k, at, left, OK
            at, problem = _record(data, at, end, lines, n, frames, k)
            if problem != OK:
                return n, k, at, left, problem
            n += 1
            left -= 1
        if at != end:
            return n, k, at, 0, UNCONSUMED
        k, at = k + 1, -1
    return n, k, -1, 0, OK


# The kernels inline `protocol.kernel_arrays`: their cache must follow it too.
drop_if_sources_changed(defined_here(globals()), [__file__, kernel_arrays.__file__])
