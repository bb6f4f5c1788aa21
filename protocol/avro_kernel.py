"""A compiled decoder from Avro binary records to column buffers.

fastavro builds one Python dict per record, which caps it near 150k rows/s on one core for a
`sales` row. This kernel (numba, compiled once and cached on disk) walks the decompressed
bytes of OCF blocks and writes each field into preallocated NumPy matrices; `protocol.body`
turns those into Arrow arrays without another copy. It handles exactly the flat record shapes
the replica accepts (checked beforehand from the writer schema); container framing and
decompression stay with fastavro.

Every read is bounds-checked: the kernel never reads past the buffer, whatever the bytes, and
reports the first problem as a status code with the row and field it happened in.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from protocol import kernel_arrays
from protocol.kernel_arrays import unowned
from protocol.kernel_cache import drop_if_sources_changed

# Field kinds.
KIND_BOOLEAN = 0
KIND_INT = 1
KIND_LONG = 2
KIND_FLOAT = 3
KIND_DOUBLE = 4
KIND_STRING = 5

# How a field is wrapped.
PLAIN = 0
NULL_FIRST = 1  # ["null", T]
NULL_SECOND = 2  # [T, "null"]

# Status codes.
OK = 0
TRUNCATED = 1
BAD_BRANCH = 2
BAD_INT = 3
BAD_LENGTH = 4
BAD_BOOLEAN = 5
TRAILING_BYTES = 6
VARINT_TOO_LONG = 7

STATUS_TEXT = {
    TRUNCATED: "the data ends inside a record",
    BAD_BRANCH: "a union branch index is not 0 or 1",
    BAD_INT: "an int value does not fit in 32 bits",
    BAD_LENGTH: "a string length is negative or runs past the data",
    BAD_BOOLEAN: "a boolean byte is not 0 or 1",
    TRAILING_BYTES: "bytes are left over after the last record",
    VARINT_TOO_LONG: "a variable-length integer is longer than 10 bytes",
}

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1


@numba.njit(cache=True, nogil=True)
def _read_long(buf: Any, pos: int, end: int) -> tuple[int, int, int]:
    """Zigzag varint at `pos`: (value, new position, status)."""
    acc = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(10):
        if pos >= end:
            return 0, pos, TRUNCATED
        byte = np.uint64(buf[pos])
        pos += 1
        acc |= (byte & np.uint64(0x7F)) << shift
        if byte < np.uint64(0x80):
            value = np.int64(acc >> np.uint64(1)) ^ -np.int64(acc & np.uint64(1))
            return int(value), pos, OK
        shift += np.uint64(7)
    return 0, pos, VARINT_TOO_LONG


@numba.njit(cache=True, nogil=True)
def decode_records(
    given: Any,
    nrows: int,
    kinds: Any,
    wraps: Any,
    values: Any,
    lengths: Any,
    valid: Any,
) -> tuple[int, int, int, int]:
    """Decode `nrows` records from bytes `given` into the output matrices.

    values[c, r]: the integer value, raw float bits, or (strings) the byte offset in `given`;
    lengths[c, r]: a string's byte length; valid[c, r]: 1 unless null.
    Returns (status, row, field, position); status OK means `given` was consumed exactly.
    The decoder passes the bytes to a step per field `unowned` (`protocol.kernel_arrays`).
    """
    buf = unowned(given)
    pos = 0
    end = buf.shape[0]
    ncols = kinds.shape[0]
    for r in range(nrows):
        for c in range(ncols):
            wrap = wraps[c]
            if wrap != PLAIN:
                branch, pos, status = _read_long(buf, pos, end)
                if status != OK:
                    return status, r, c, pos
                if branch != 0 and branch != 1:
                    return BAD_BRANCH, r, c, pos
                if (wrap == NULL_FIRST and branch == 0) or (wrap == NULL_SECOND and branch == 1):
                    valid[c, r] = 0
                    values[c, r] = 0
                    lengths[c, r] = 0
                    continue
            valid[c, r] = 1
            kind = kinds[c]
            if kind == KIND_LONG or kind == KIND_INT:
                value, pos, status = _read_long(buf, pos, end)
                if status != OK:
                    return status, r, c, pos
                if kind == KIND_INT and (value < _INT32_MIN or value > _INT32_MAX):
                    return BAD_INT, r, c, pos
                values[c, r] = value
            elif kind == KIND_STRING:
                size, pos, status = _read_long(buf, pos, end)
                if status != OK:
                    return status, r, c, pos
                if size < 0 or size > end - pos:
                    return BAD_LENGTH, r, c, pos
                values[c, r] = pos
                lengths[c, r] = size
                pos += size
            elif kind == KIND_BOOLEAN:
                if pos >= end:
                    return TRUNCATED, r, c, pos
                byte = buf[pos]
                if byte > 1:
                    return BAD_BOOLEAN, r, c, pos
                values[c, r] = byte
                pos += 1
            else:
                width = 4 if kind == KIND_FLOAT else 8
                if end - pos < width:
                    return TRUNCATED, r, c, pos
                bits = np.uint64(0)
                for k in range(width):
                    bits |= np.uint64(buf[pos + k]) << np.uint64(8 * k)
                values[c, r] = np.int64(bits)
                pos += width
    if pos != end:
        return TRAILING_BYTES, nrows, 0, pos
    return OK, nrows, 0, pos


@numba.njit(cache=True, nogil=True)
def gather_strings(buf: Any, starts: Any, sizes: Any, out: Any, offsets: Any) -> int:
    """Copy one string column's bytes out of `buf` into Arrow layout (offsets + data)."""
    o = 0
    n = starts.shape[0]
    for i in range(n):
        offsets[i] = o
        size = sizes[i]
        if size > 0:
            start = starts[i]
            out[o : o + size] = buf[start : start + size]
            o += size
    offsets[n] = o
    return o


# The decoder inlines `protocol.kernel_arrays`: its cache must follow that file too.
drop_if_sources_changed([decode_records], [__file__, kernel_arrays.__file__])
