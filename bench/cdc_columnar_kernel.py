"""A compiled reading of a batch of Qlik JSON data messages into flat arrays: the prototype
that `bench.cdc_columnar` measures the columnar origin's design with (issue 46). It is not on
the origin's path.

One pass over a batch's bytes (numba, compiled once and cached on disk): for every message,
its `messageSchemaId` and headers as ranges of an output buffer, and every field of its
`data` and `beforeData` rows as one line of `fields` (which message and side, the key's range,
the value's kind, an integer, or a string's range). Strings are unescaped into the output
buffer and their UTF-8 is checked, so a string's range there is what an Avro body carries.

It reads only what it is sure of, as the one-pass decoder does (`podd_cdc.qlik_fast`): a
message with a `\\u` escape, a number that is not an int64, a field nested deeper than a row,
a key it does not know or bytes that are not UTF-8 is marked not read (`M_OK` 0), for the
exact path to decide.

Not yet what the origin's path would need: a key given twice in one object (the exact path
takes the last) and UTF-8's overlong and surrogate forms are not refused, and a row's keys
are not checked against its table here (`bench.cdc_columnar` drops unknown ones).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

# A field's value kind.
V_NULL, V_INT, V_STR = 0, 1, 2
# Columns of `fields`: one line a field of a row.
F_MSG, F_SIDE, F_KEY0, F_KEY1, F_KIND, F_INT, F_STR0, F_STR1 = range(8)
FIELD_COLUMNS = 8
# Columns of `heads`: one line a message. Header values are ranges (start, end) of `out`.
M_OP, M_SEQ, M_TIME, M_TX, M_MASK, M_CHANGE_MASK, M_POSITION, M_SCHEMA_ID = (
    0,
    2,
    4,
    6,
    8,
    10,
    12,
    14,
)
M_COUNTER, M_LAST, M_OK = 16, 17, 18
HEAD_COLUMNS = 19
#: The words the kernel matches, in this order (`WORD_*` are their indexes).
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
_HEADER_SLOTS = np.array([M_OP, M_SEQ, M_TIME, M_TX, M_MASK, M_CHANGE_MASK, M_POSITION])
_W_SLOTTED = 8  # WORDS[8:15] are the headers read as text, in `_HEADER_SLOTS`' order


def word_table() -> tuple[Any, Any]:
    """`WORDS` as the kernel takes them: a padded byte matrix and the lengths."""
    width = max(map(len, WORDS))
    table = np.zeros((len(WORDS), width), np.uint8)
    for k, word in enumerate(WORDS):
        table[k, : len(word)] = np.frombuffer(word.encode(), np.uint8)
    return table, np.array([len(w) for w in WORDS], np.int64)


@numba.njit(cache=True, nogil=True)
def _ws(buf: Any, i: int, e: int) -> int:
    while i < e and (buf[i] == 32 or buf[i] == 10 or buf[i] == 13 or buf[i] == 9):
        i += 1
    return i


@numba.njit(cache=True, nogil=True)
def _utf8_tail(lead: int) -> int:
    """How many continuation bytes follow `lead`; -1 if it leads no sequence."""
    if 0xC2 <= lead <= 0xDF:
        return 1
    if 0xE0 <= lead <= 0xEF:
        return 2
    if 0xF0 <= lead <= 0xF4:
        return 3
    return -1


@numba.njit(cache=True, nogil=True)
def _string(buf: Any, i: int, e: int, out: Any, o: int) -> tuple[int, int, bool]:
    """From just past an opening quote: the text unescaped into `out[o:]`. Returns (the index
    past the closing quote, the end in `out`, whether it was read)."""
    while i < e:
        d = buf[i]
        if d == 34:
            return i + 1, o, True
        if d == 92:
            x = buf[i + 1] if i + 1 < e else 0
            if x == 34 or x == 92 or x == 47:
                out[o] = x
            elif x == 110:
                out[o] = 10
            elif x == 116:
                out[o] = 9
            elif x == 114:
                out[o] = 13
            elif x == 98:
                out[o] = 8
            elif x == 102:
                out[o] = 12
            else:
                return i, o, False  # \u and anything else: the exact path decides
            o += 1
            i += 2
            continue
        if d < 32:
            return i, o, False
        if d < 128:
            out[o] = d
            o += 1
            i += 1
            continue
        k = _utf8_tail(d)
        if k < 0 or i + k >= e:
            return i, o, False
        for q in range(1, k + 1):
            if (buf[i + q] & 0xC0) != 0x80:
                return i, o, False
        # (overlong E0/F0 and surrogate ED forms are the strict check's: not made here)
        for q in range(k + 1):
            out[o + q] = buf[i + q]
        o += k + 1
        i += k + 1
    return i, o, False


@numba.njit(cache=True, nogil=True)
def _number(buf: Any, i: int, e: int) -> tuple[int, int, bool]:
    """An int64 from `buf[i]`: (the index past it, its value, whether it is one)."""
    negative = buf[i] == 45
    j = i + 1 if negative else i
    start = j
    value = 0
    while j < e and 48 <= buf[j] <= 57:
        digit = buf[j] - 48
        if value > (9223372036854775807 - digit) // 10:
            return j, 0, False
        value = value * 10 + digit
        j += 1
    if j == start or (j < e and (buf[j] == 46 or buf[j] == 101 or buf[j] == 69)):
        return j, 0, False
    return j, -value if negative else value, True


@numba.njit(cache=True, nogil=True)
def _is(text: Any, s: int, e: int, words: Any, lengths: Any, w: int) -> bool:
    n = lengths[w]
    if e - s != n:
        return False
    for q in range(n):
        if text[s + q] != words[w, q]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _null(buf: Any, i: int, e: int) -> bool:
    return (
        i + 4 <= e
        and buf[i] == 110
        and buf[i + 1] == 117
        and buf[i + 2] == 108
        and buf[i + 3] == 108
    )


@numba.njit(cache=True, nogil=True)
def _key(buf: Any, i: int, e: int, out: Any, o: int) -> tuple[int, int, bool]:
    """A key and its colon, unescaped at `out[o:]` (the caller drops it after matching):
    (the index of its value, the key's end in `out`, whether it was read)."""
    i = _ws(buf, i, e)
    if i >= e or buf[i] != 34:
        return i, o, False
    i, end, good = _string(buf, i + 1, e, out, o)
    i = _ws(buf, i, e)
    if not good or i >= e or buf[i] != 58:
        return i, end, False
    return _ws(buf, i + 1, e), end, True


@numba.njit(cache=True, nogil=True)
def _next(buf: Any, i: int, e: int) -> tuple[int, int]:
    """After a value in an object: (the index past a comma, 1), past the closing brace (0),
    or (i, -1) for anything else."""
    i = _ws(buf, i, e)
    if i < e and buf[i] == 44:
        return i + 1, 1
    if i < e and buf[i] == 125:
        return i + 1, 0
    return i, -1


@numba.njit(cache=True, nogil=True)
def _row(
    buf: Any, i: int, e: int, out: Any, o: int, m: int, side: int, fields: Any, f: int
) -> tuple[int, int, int, bool]:
    """A row's fields, from just past its '{': (index, out end, fields end, read)."""
    i = _ws(buf, i, e)
    if i < e and buf[i] == 125:
        return i + 1, o, f, True
    more = 1
    while more == 1:
        key0 = o
        i, o, good = _key(buf, i, e, out, o)
        if not good or f >= fields.shape[0]:
            return i, o, f, False
        fields[f, :] = 0  # a field's every column set: `fields` comes uninitialised
        fields[f, F_MSG] = m
        fields[f, F_SIDE] = side
        fields[f, F_KEY0] = key0
        fields[f, F_KEY1] = o
        c = buf[i]
        if c == 34:
            start = o
            i, o, good = _string(buf, i + 1, e, out, o)
            fields[f, F_KIND] = V_STR
            fields[f, F_STR0] = start
            fields[f, F_STR1] = o
        elif c == 45 or 48 <= c <= 57:
            i, value, good = _number(buf, i, e)
            fields[f, F_KIND] = V_INT
            fields[f, F_INT] = value
        elif _null(buf, i, e):
            fields[f, F_KIND] = V_NULL
            i += 4
        else:
            good = False
        if not good:
            return i, o, f, False
        f += 1
        i, more = _next(buf, i, e)
    return i, o, f, more == 0


@numba.njit(cache=True, nogil=True)
def _headers(
    buf: Any, i: int, e: int, out: Any, o: int, words: Any, lengths: Any, head: Any
) -> tuple[int, int, bool]:
    """The headers object, from just past its '{', into `head`: (index, out end, read)."""
    i = _ws(buf, i, e)
    if i < e and buf[i] == 125:
        return i + 1, o, True
    more = 1
    while more == 1:
        key0 = o
        i, key1, good = _key(buf, i, e, out, o)
        if not good:
            return i, o, False
        slot = -1
        for k in range(_HEADER_SLOTS.shape[0]):
            if _is(out, key0, key1, words, lengths, _W_SLOTTED + k):
                slot = _HEADER_SLOTS[k]
        if slot >= 0 and buf[i] == 34:
            i, o, good = _string(buf, i + 1, e, out, key0)
            head[slot] = key0
            head[slot + 1] = o
        elif slot >= 0 and _null(buf, i, e):
            i += 4
        elif _is(out, key0, key1, words, lengths, 15):  # transactionEventCounter
            if _null(buf, i, e):
                i += 4
            else:
                i, counter, good = _number(buf, i, e)
                head[M_COUNTER] = counter
        elif _is(out, key0, key1, words, lengths, 16) and buf[i] == 116:  # ...LastEvent
            head[M_LAST] = 1
            i += 4
        elif _is(out, key0, key1, words, lengths, 16) and buf[i] == 102:
            head[M_LAST] = 0
            i += 5
        else:
            good = False
        if not good:
            return i, o, False
        i, more = _next(buf, i, e)
    return i, o, more == 0


@numba.njit(cache=True, nogil=True)
def _message(
    buf: Any, i: int, e: int, out: Any, o: int, words: Any, lengths: Any, m: int, ctx: Any
) -> tuple[int, int, int, bool]:
    """The `message` object, from just past its '{': (index, out end, fields end, read)."""
    head, fields, f = ctx
    more = 1
    while more == 1:
        key0 = o
        i, key1, good = _key(buf, i, e, out, o)
        if not good:
            return i, o, f, False
        data = _is(out, key0, key1, words, lengths, 6)
        if data or _is(out, key0, key1, words, lengths, 7):
            if _null(buf, i, e):
                i += 4
            elif buf[i] == 123:
                i, o, f, good = _row(buf, i + 1, e, out, key0, m, 0 if data else 1, fields, f)
            else:
                good = False
        elif _is(out, key0, key1, words, lengths, 4) and buf[i] == 123:
            i, o, good = _headers(buf, i + 1, e, out, key0, words, lengths, head)
        else:
            good = False
        if not good:
            return i, o, f, False
        i, more = _next(buf, i, e)
    return i, o, f, more == 0


@numba.njit(cache=True, nogil=True)
def _envelope(
    buf: Any, i: int, e: int, out: Any, o: int, words: Any, lengths: Any, m: int, ctx: Any
) -> tuple[int, int, bool]:
    """One message from its first byte: (out end, fields end, read)."""
    head, fields, f = ctx
    i = _ws(buf, i, e)
    if i >= e or buf[i] != 123:
        return o, f, False
    i += 1
    more = 1
    while more == 1:
        key0 = o
        i, key1, good = _key(buf, i, e, out, o)
        if not good:
            return o, f, False
        if _is(out, key0, key1, words, lengths, 5) and buf[i] == 123:  # message
            i, o, f, good = _message(buf, i + 1, e, out, key0, words, lengths, m, (head, fields, f))
        elif _is(out, key0, key1, words, lengths, 2) and buf[i] == 34:  # messageSchemaId
            i, o, good = _string(buf, i + 1, e, out, key0)
            head[M_SCHEMA_ID] = key0
            head[M_SCHEMA_ID + 1] = o
        elif _is(out, key0, key1, words, lengths, 0) and buf[i] == 34:  # magic: atMSG
            i, end, good = _string(buf, i + 1, e, out, key0)
            good = good and _is(out, key0, end, words, lengths, 17)
        elif _is(out, key0, key1, words, lengths, 1) and buf[i] == 34:  # type: DT
            i, end, good = _string(buf, i + 1, e, out, key0)
            good = good and _is(out, key0, end, words, lengths, 18)
        elif (
            _is(out, key0, key1, words, lengths, 3) or _is(out, key0, key1, words, lengths, 4)
        ) and _null(buf, i, e):
            i += 4  # messageSchema and the envelope's headers: null in a data message
        else:
            good = False
        if not good:
            return o, f, False
        i, more = _next(buf, i, e)
    return o, f, more == 0 and _ws(buf, i, e) == e


@numba.njit(cache=True, nogil=True)
def read_batch(
    buf: Any, starts: Any, ends: Any, words: Any, lengths: Any, out: Any, heads: Any, fields: Any
) -> tuple[int, int]:
    """Every message `buf[starts[m]:ends[m]]` into `heads[m]` and lines of `fields`, its
    texts into `out` (as large as `buf`); a message not read keeps no field. Returns the
    bytes of `out` and the lines of `fields` used."""
    o = 0
    f = 0
    for m in range(starts.shape[0]):
        head = heads[m]
        head[:] = 0
        head[M_COUNTER] = -1
        head[M_LAST] = -1
        end, f_end, good = _envelope(
            buf, starts[m], ends[m], out, o, words, lengths, m, (head, fields, f)
        )
        head[M_OK] = good
        if good:
            o, f = end, f_end
        else:
            head[:M_COUNTER] = 0
    return o, f
