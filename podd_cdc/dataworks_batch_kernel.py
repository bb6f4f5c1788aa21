"""A compiled reading of a batch of DataWorks JSON messages into flat arrays: the batch decoder
of DataWorks on arrays (issue 46, docs/cdc/internals.md, step 1). The origin's path does not
use it yet; `bench.cdc_dataworks_batch` measures it beside the exact decoder.

One pass over a batch's bytes (numba, compiled once and cached on disk): for every message,
its operation, `sequenceId` and `timestamp.eventTime` as integers, where its `schema` stands in
the batch (its bytes, not read: `podd_cdc.dataworks_batch` compares them with the schemas the
exact decoder has read), and every field of `payload.after.dataColumn` (side 0) and
`payload.before.dataColumn` (side 1) as one line of `fields`, in the layout of
`podd_cdc.json_rows` that `podd_cdc.qlik_columns` turns into columns.

It reads a message only where it reads it as JSON does, and only the shape of a DataWorks row
message, heartbeat or marker. Anything else is marked not read (`M_OK` 0), for the exact path
to decide: an operation other than those (a table's DDL), a key it does not know or given twice,
a `ddl` that is not null, an image that is not `{"dataColumn": {...}}`, a value nested deeper
than a field, a `\\u` escape, bytes that are not UTF-8 as Python reads it, trailing bytes.
Whether an id or a time fits its rule, and a row its table, is the caller's to check.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from podd_cdc import json_rows, json_scan
from podd_cdc.dataworks import MARKERS
from podd_cdc.json_rows import FALSE, NULL, TRUE, opened, row
from podd_cdc.json_scan import (
    container_end,
    int64_of,
    is_word,
    key,
    literal,
    next_member,
    number_end,
    string,
    word_of,
    ws,
)
from protocol import kernel_arrays
from protocol.kernel_arrays import pointer, unowned
from protocol.kernel_cache import defined_here, drop_if_sources_changed

#: Operation codes (`M_OP`), as `OPERATIONS` spells them: a row's, a heartbeat, and from
#: `FIRST_MARKER` on the markers that change no row (`dataworks.MARKERS`).
INSERT, UPDATE_AFTER, UPDATE_BEFOR, DELETE, HEARTBEAT = range(5)
FIRST_MARKER = 5
OPERATIONS = ("INSERT", "UPDATE_AFTER", "UPDATE_BEFOR", "DELETE", "MHEARTBEAT", *MARKERS)
# Columns of `heads`, one line a message: the operation; the id and the eventTime (valid where
# `HAS_SEQUENCE` and `HAS_EVENT` are set); the schema's (start, end) in the batch, -1 where it
# is null or not given; what the message holds (`HAS_*` bits); whether it was read.
M_OP, M_SEQUENCE, M_EVENT, M_SCHEMA, M_SCHEMA_END, M_HAS, M_OK = range(7)
HEAD_COLUMNS = 7
HAS_AFTER, HAS_BEFORE, HAS_SEQUENCE, HAS_EVENT = 1, 2, 4, 8
#: The digits of the longest whole number read as text: any such text fits an int64.
MOST_DIGITS = 18
#: The words the kernel matches, in this order (their indexes are the `_W*` below).
WORDS = (
    "schema",
    "payload",
    "version",
    "before",
    "after",
    "sequenceId",
    "scn",
    "op",
    "timestamp",
    "ddl",
    "dataColumn",
    "eventTime",
    "systemTime",
    "checkpointTime",
    *OPERATIONS,
)
_W_SCHEMA, _W_PAYLOAD, _W_VERSION = range(3)
_W_BEFORE, _W_AFTER, _W_SEQUENCE, _W_SCN, _W_OP, _W_TIMESTAMP, _W_DDL = range(3, 10)
_W_DATA_COLUMN = 10
_W_EVENT, _W_SYSTEM, _W_CHECKPOINT = 11, 12, 13
_W_OPERATIONS = 14


def word_table() -> tuple[Any, Any]:
    """`WORDS` as the kernel takes them (`json_scan.word_table`)."""
    return json_scan.word_table(WORDS)


@numba.njit(cache=True, nogil=True)
def _scalar(buf: Any, i: int, e: int, out: Any, o: int) -> tuple[int, bool]:
    """Past a value that is not read but must be JSON: a string (its UTF-8 checked, unescaped
    into `out[o:]` and dropped), a number, true, false or null. (index past it, read)."""
    c = buf[i]
    if c == 34:
        i, _, good = string(buf, i + 1, e, out, o)
        return i, good
    if c == 45 or 48 <= c <= 57:
        end, _ = number_end(buf, i, e)
        return end, end > 0
    if literal(buf, i, e, NULL) or literal(buf, i, e, TRUE):
        return i + 4, True
    if literal(buf, i, e, FALSE):
        return i + 5, True
    return i, False


@numba.njit(cache=True, nogil=True)
def _whole(buf: Any, i: int, e: int, out: Any, o: int) -> tuple[int, int, bool, bool]:
    """A value that should be a whole number: a JSON integer of 0 or more that fits an
    int64, or a string of 1 to `MOST_DIGITS` ASCII digits (anything else is read as JSON and
    marked not whole, for the exact path to judge). (index past it, value, whole, read)."""
    c = buf[i]
    if c == 34:
        start = o
        i, end, good = string(buf, i + 1, e, out, o)
        digits = good and 0 < end - start <= MOST_DIGITS
        for k in range(start, end):
            digits = digits and 48 <= out[k] <= 57
        if not digits:
            return i, 0, False, good
        value, _ = int64_of(out, start, end)
        return i, value, True, True
    if c == 45 or 48 <= c <= 57:
        end, whole = number_end(buf, i, e)
        if end < 0:
            return i, 0, False, False
        value, fits = int64_of(buf, i, end) if whole else (0, False)
        return end, value, fits and value >= 0, True
    i, good = _scalar(buf, i, e, out, o)
    return i, 0, False, good


@numba.njit(cache=True, nogil=True)
def _timestamp(
    buf: Any, i: int, e: int, out: Any, o: int, words: Any, lengths: Any, head: Any
) -> tuple[int, bool]:
    """`payload.timestamp` from just past its '{': its eventTime into `head`; its other
    times checked as JSON and dropped. (index, read)."""
    i, empty = opened(buf, i, e)
    if empty:
        return i, True
    seen = 0
    more = 1
    while more == 1:
        i, key1, good = key(buf, i, e, out, o)
        if not good:
            return i, False
        w = word_of(out, o, key1, words, lengths, _W_EVENT, _W_CHECKPOINT + 1)
        if w < 0 or seen & (1 << w):
            return i, False
        seen |= 1 << w
        if w == _W_EVENT:
            i, value, whole, good = _whole(buf, i, e, out, o)
            if whole:
                head[M_EVENT] = value
                head[M_HAS] |= HAS_EVENT
        else:
            i, good = _scalar(buf, i, e, out, o)
        if not good:
            return i, False
        i, more = next_member(buf, i, e)
    return i, more == 0


@numba.njit(cache=True, nogil=True)
def _image(
    buf: Any, i: int, e: int, out: Any, o: int, words: Any, lengths: Any, m: int, ctx: Any
) -> tuple[int, int, int, bool]:
    """`{"dataColumn": {row}}` from just past its '{', the row's fields into `fields` as side
    `side`: (index, out end, fields end, read). Any other key, or none, is not read."""
    side, fields, f = ctx
    i, key1, good = key(buf, ws(buf, i, e), e, out, o)
    if not good or not is_word(out, o, key1, words, lengths, _W_DATA_COLUMN) or buf[i] != 123:
        return i, o, f, False
    i, o, f, good = row(buf, i + 1, e, out, o, m, side, fields, f)
    if not good:
        return i, o, f, False
    i, more = next_member(buf, i, e)
    return i, o, f, more == 0


@numba.njit(cache=True, nogil=True)
def _payload(
    buf: Any, i: int, e: int, out: Any, o: int, words: Any, lengths: Any, m: int, ctx: Any
) -> tuple[int, int, int, bool]:
    """`payload` from just past its '{': (index, out end, fields end, read)."""
    head, fields, f = ctx
    i, empty = opened(buf, i, e)
    if empty:
        return i, o, f, False  # no operation
    seen = 0
    more = 1
    while more == 1:
        key0 = o
        i, key1, good = key(buf, i, e, out, o)
        if not good:
            return i, o, f, False
        w = word_of(out, key0, key1, words, lengths, _W_BEFORE, _W_DDL + 1)
        if w < 0 or seen & (1 << w):
            return i, o, f, False
        seen |= 1 << w
        if (w == _W_BEFORE or w == _W_AFTER or w == _W_DDL) and literal(buf, i, e, NULL):
            i += 4
        elif (w == _W_BEFORE or w == _W_AFTER) and buf[i] == 123:
            side = 0 if w == _W_AFTER else 1
            i, o, f, good = _image(buf, i + 1, e, out, key0, words, lengths, m, (side, fields, f))
            head[M_HAS] |= HAS_AFTER if side == 0 else HAS_BEFORE
        elif w == _W_SEQUENCE:
            i, value, whole, good = _whole(buf, i, e, out, key0)
            if whole:
                head[M_SEQUENCE] = value
                head[M_HAS] |= HAS_SEQUENCE
        elif w == _W_SCN:
            i, good = _scalar(buf, i, e, out, key0)
        elif w == _W_OP and buf[i] == 34:
            i, end, good = string(buf, i + 1, e, out, key0)
            op = word_of(out, key0, end, words, lengths, _W_OPERATIONS, len(words))
            head[M_OP] = op - _W_OPERATIONS
            good = good and op >= 0
        elif w == _W_TIMESTAMP and buf[i] == 123:
            i, good = _timestamp(buf, i + 1, e, out, key0, words, lengths, head)
        else:
            good = False
        if not good:
            return i, o, f, False
        i, more = next_member(buf, i, e)
    return i, o, f, more == 0 and head[M_OP] >= 0  # no operation: the exact path's


@numba.njit(cache=True, nogil=True)
def _message(
    buf: Any, i: int, e: int, out: Any, o: int, words: Any, lengths: Any, m: int, ctx: Any
) -> tuple[int, int, bool]:
    """One message from its first byte: (out end, fields end, read)."""
    head, fields, f = ctx
    i = ws(buf, i, e)
    if i >= e or buf[i] != 123:
        return o, f, False
    i, empty = opened(buf, i + 1, e)
    more = 0 if empty else 1
    seen = 0
    while more == 1:
        key0 = o
        i, key1, good = key(buf, i, e, out, o)
        if not good:
            return o, f, False
        w = word_of(out, key0, key1, words, lengths, _W_SCHEMA, _W_VERSION + 1)
        if w < 0 or seen & (1 << w):
            return o, f, False
        seen |= 1 << w
        if w == _W_PAYLOAD and buf[i] == 123:
            i, o, f, good = _payload(buf, i + 1, e, out, key0, words, lengths, m, (head, fields, f))
        elif w == _W_SCHEMA and buf[i] == 123:
            end = container_end(buf, i, e)
            head[M_SCHEMA] = i
            head[M_SCHEMA_END] = end
            good = end > 0
            i = end if good else i
        elif w == _W_SCHEMA and literal(buf, i, e, NULL):
            i += 4
        elif w == _W_VERSION:
            i, good = _scalar(buf, i, e, out, key0)
        else:
            good = False
        if not good:
            return o, f, False
        i, more = next_member(buf, i, e)
    return o, f, more == 0 and seen & (1 << _W_PAYLOAD) != 0 and ws(buf, i, e) == e


@numba.njit(cache=True, nogil=True)
def _read_batch(
    buf: Any, starts: Any, ends: Any, words: Any, lengths: Any, out: Any, heads: Any, fields: Any
) -> tuple[int, int]:
    """`read_batch`, on arrays it hands its steps uncounted."""
    o = 0
    f = 0
    for m in range(starts.shape[0]):
        head = heads[m]
        head[:] = -1
        head[M_SEQUENCE] = 0
        head[M_EVENT] = 0
        head[M_HAS] = 0
        end, f_end, good = _message(
            buf, starts[m], ends[m], out, o, words, lengths, m, (head, fields, f)
        )
        head[M_OK] = good
        if good:
            o, f = end, f_end
        else:
            head[:] = -1
            head[M_HAS] = 0
            head[M_OK] = 0
    return o, f


@numba.njit(cache=True, nogil=True)
def read_batch(
    buf: Any, starts: Any, ends: Any, words: Any, lengths: Any, out: Any, heads: Any, fields: Any
) -> tuple[int, int]:
    """Every message `buf[starts[m]:ends[m]]` into `heads[m]` and lines of `fields`, its
    texts into `out` (as large as `buf`); a message not read keeps no field and no text.
    Returns the bytes of `out` and the lines of `fields` used. Every array is C-contiguous;
    the steps get them `unowned` and the bytes as `pointer`s, as the Qlik kernel's do."""
    return _read_batch(
        pointer(buf),
        unowned(starts),
        unowned(ends),
        unowned(words),
        unowned(lengths),
        pointer(out),
        unowned(heads),
        unowned(fields),
    )


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIXER = np.uint64(0x100000001B3)


@numba.njit(cache=True, nogil=True)
def sampled_keys(buf: Any, starts: Any, ends: Any) -> Any:
    """For each text `buf[starts[k]:ends[k]]` (a message's schema), a key mixed from its
    length and the eight bytes before each quarter of it ends (from its start, where it is
    shorter): `podd_cdc.dataworks_batch._sampled`'s."""
    keys = np.empty(starts.shape[0], np.int64)
    for k in range(starts.shape[0]):
        s = starts[k]
        size = ends[k] - s
        key = np.uint64(size) * _GOLDEN
        for quarter in range(1, 5):
            place = s + (size * quarter) // 4
            word = np.uint64(0)
            for b in range(8):
                word |= np.uint64(buf[max(place - 8 + b, s)]) << np.uint64(8 * b)
            key = (key ^ word) * _MIXER
        keys[k] = np.int64(key)
    return keys


# The kernels inline `podd_cdc.json_rows`' and `podd_cdc.json_scan`'s steps and
# `protocol.kernel_arrays`: each one's cache must follow those files too.
drop_if_sources_changed(
    defined_here(globals()),
    [__file__, json_rows.__file__, json_scan.__file__, kernel_arrays.__file__],
)
