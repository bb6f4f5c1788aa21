"""A compiled reading of a batch of Qlik JSON data messages into flat arrays: the batch
decoder of the columnar origin (issue 46, docs/cdc/internals.md). The origin's path does not
use it yet; `bench.cdc_columnar` measures the design with it.

One pass over a batch's bytes (numba, compiled once and cached on disk): for every message,
its `messageSchemaId` and headers as ranges of an output buffer, and every field of its
`data` and `beforeData` rows as one line of `fields` (which message and side, the key's range
and hash, the value's kind, an integer, or a string's range). Strings are unescaped into the
output buffer and their UTF-8 is checked, so a string's range there is what an Avro body
carries.

It reads a message only where it reads it as JSON does, and only the shape of a Qlik data
message (`podd_cdc.json_scan` holds the strict steps). Anything else is marked not read
(`M_OK` 0), for the exact path to decide: a `\\u` escape, a counter that is not a whole int64,
a value nested deeper than a row, a key it does not know, a key given twice in one object
(JSON's readers disagree on which one counts), bytes that are not UTF-8 as Python reads it,
trailing bytes. Whether a row's fields belong to its table is the caller's to check.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from podd_cdc import json_rows, json_scan
from podd_cdc.json_rows import FALSE, NULL, TRUE, opened, row
from podd_cdc.json_scan import (
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

# Columns of `heads`: one line a message. A header's text is a range (start, end) of `out`,
# (-1, -1) where the header is null or not given.
M_OP, M_SEQ, M_TIME, M_TX, M_MASK, M_CHANGE_MASK, M_POSITION, M_SCHEMA_ID = range(0, 16, 2)
# The counter (valid where `HAS_COUNTER` is set), the last-event flag (1, 0, or -1 for null
# or not given), what the message holds (`HAS_*` bits), and whether it was read.
M_COUNTER, M_LAST, M_HAS, M_OK = 16, 17, 18, 19
HEAD_COLUMNS = 20
HAS_DATA, HAS_BEFORE, HAS_COUNTER, HAS_MESSAGE = 1, 2, 4, 8
#: The words the kernel matches, in this order (their indexes are the `_W*` below).
WORDS = (
    "magic",
    "type",
    "messageSchemaId",
    "messageSchema",
    "headers",
    "message",
    "data",
    "beforeData",
    "operation",
    "changeSequence",
    "timestamp",
    "transactionId",
    "columnMask",
    "changeMask",
    "streamPosition",
    "transactionEventCounter",
    "transactionLastEvent",
    "atMSG",
    "DT",
)
_W_MAGIC, _W_TYPE, _W_SCHEMA_ID, _W_SCHEMA, _W_HEADERS, _W_MESSAGE, _W_DATA, _W_BEFORE = range(8)
_W_COUNTER, _W_LAST, _W_AT_MSG, _W_DT = 15, 16, 17, 18
_HEADER_SLOTS = np.array([M_OP, M_SEQ, M_TIME, M_TX, M_MASK, M_CHANGE_MASK, M_POSITION])
_W_SLOTTED = 8  # WORDS[8:15] are the headers read as text, in `_HEADER_SLOTS`' order


def word_table() -> tuple[Any, Any]:
    """`WORDS` as the kernel takes them (`json_scan.word_table`)."""
    return json_scan.word_table(WORDS)


@numba.njit(cache=True, nogil=True)
def _headers(
    buf: Any, i: int, e: int, out: Any, o: int, words: Any, lengths: Any, head: Any
) -> tuple[int, int, bool]:
    """The headers object, from just past its '{', into `head`: (index, out end, read)."""
    i, empty = opened(buf, i, e)
    if empty:
        return i, o, True
    seen = 0
    more = 1
    while more == 1:
        key0 = o
        i, key1, good = key(buf, i, e, out, o)
        if not good:
            return i, o, False
        w = word_of(out, key0, key1, words, lengths, _W_SLOTTED, _W_LAST + 1)
        if w < 0 or seen & (1 << w):
            return i, o, False
        seen |= 1 << w
        if w < _W_COUNTER and buf[i] == 34:
            slot = _HEADER_SLOTS[w - _W_SLOTTED]
            i, o, good = string(buf, i + 1, e, out, key0)
            head[slot] = key0
            head[slot + 1] = o
        elif literal(buf, i, e, NULL):
            i += 4  # null: as if not given
        elif w == _W_COUNTER and (buf[i] == 45 or 48 <= buf[i] <= 57):
            end, whole = number_end(buf, i, e)
            counter, good = int64_of(buf, i, end)
            good = good and whole and end > 0
            i = end if good else i
            head[M_COUNTER] = counter
            head[M_HAS] |= HAS_COUNTER
        elif w == _W_LAST and literal(buf, i, e, TRUE):
            head[M_LAST] = 1
            i += 4
        elif w == _W_LAST and literal(buf, i, e, FALSE):
            head[M_LAST] = 0
            i += 5
        else:
            good = False
        if not good:
            return i, o, False
        i, more = next_member(buf, i, e)
    return i, o, more == 0


@numba.njit(cache=True, nogil=True)
def _message(
    buf: Any, i: int, e: int, out: Any, o: int, words: Any, lengths: Any, m: int, ctx: Any
) -> tuple[int, int, int, bool]:
    """The `message` object, from just past its '{': (index, out end, fields end, read)."""
    head, fields, f = ctx
    i, empty = opened(buf, i, e)
    if empty:
        return i, o, f, True
    seen = 0
    more = 1
    while more == 1:
        key0 = o
        i, key1, good = key(buf, i, e, out, o)
        if not good:
            return i, o, f, False
        w = word_of(out, key0, key1, words, lengths, _W_HEADERS, _W_BEFORE + 1)
        if w < 0 or w == _W_MESSAGE or seen & (1 << w):
            return i, o, f, False
        seen |= 1 << w
        if w != _W_HEADERS and literal(buf, i, e, NULL):
            i += 4
        elif w != _W_HEADERS and buf[i] == 123:
            side = 0 if w == _W_DATA else 1
            i, o, f, good = row(buf, i + 1, e, out, key0, m, side, fields, f)
            head[M_HAS] |= HAS_DATA if side == 0 else HAS_BEFORE
        elif w == _W_HEADERS and buf[i] == 123:
            i, o, good = _headers(buf, i + 1, e, out, key0, words, lengths, head)
        else:
            good = False
        if not good:
            return i, o, f, False
        i, more = next_member(buf, i, e)
    return i, o, f, more == 0


@numba.njit(cache=True, nogil=True)
def _envelope(
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
        w = word_of(out, key0, key1, words, lengths, _W_MAGIC, _W_MESSAGE + 1)
        if w < 0 or seen & (1 << w):
            return o, f, False
        seen |= 1 << w
        if w == _W_MESSAGE and buf[i] == 123:
            i, o, f, good = _message(buf, i + 1, e, out, key0, words, lengths, m, (head, fields, f))
            head[M_HAS] |= HAS_MESSAGE
        elif w == _W_SCHEMA_ID and buf[i] == 34:
            i, o, good = string(buf, i + 1, e, out, key0)
            head[M_SCHEMA_ID] = key0
            head[M_SCHEMA_ID + 1] = o
        elif w == _W_MAGIC and buf[i] == 34:
            i, end, good = string(buf, i + 1, e, out, key0)
            good = good and is_word(out, key0, end, words, lengths, _W_AT_MSG)
        elif w == _W_TYPE and buf[i] == 34:
            i, end, good = string(buf, i + 1, e, out, key0)
            good = good and is_word(out, key0, end, words, lengths, _W_DT)
        elif (w == _W_SCHEMA or w == _W_HEADERS) and literal(buf, i, e, NULL):
            i += 4  # messageSchema and the envelope's headers: null in a data message
        else:
            good = False
        if not good:
            return o, f, False
        i, more = next_member(buf, i, e)
    return o, f, more == 0 and ws(buf, i, e) == e


@numba.njit(cache=True, nogil=True)
def _read_batch(
    buf: Any, starts: Any, ends: Any, words: Any, lengths: Any, out: Any, heads: Any, fields: Any
) -> tuple[int, int]:
    """`read_batch`, on arrays it hands its steps uncounted."""
    o = 0
    f = 0
    for m in range(starts.shape[0]):
        head = heads[m]
        head[:] = -1  # every text null or not given, the last-event flag too
        head[M_COUNTER] = 0
        head[M_HAS] = 0
        end, f_end, good = _envelope(
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
    the steps get them `unowned` (half the kernel's time went to counting references), and
    the bytes read and written as `pointer`s (passed as arrays, they cost a third of what
    was left: `protocol.kernel_arrays`)."""
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


# The kernels inline `podd_cdc.json_rows`' and `podd_cdc.json_scan`'s steps and
# `protocol.kernel_arrays`: each one's cache must follow those files too.
drop_if_sources_changed(
    defined_here(globals()),
    [__file__, json_rows.__file__, json_scan.__file__, kernel_arrays.__file__],
)
