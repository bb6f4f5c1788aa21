"""Compiled steps of reading JSON bytes, for the batch readers (`podd_cdc.qlik_batch_kernel`).

Each step reads from `buf[i]` up to `e` and answers whether it read what it was asked to; a
step that is not sure of what it sees answers no, and the message goes to the exact path.
The steps are strict where JSON and UTF-8 are: a string's UTF-8 is checked as Python's
`bytes.decode` checks it (no overlong form, no surrogate, nothing past U+10FFFF), a control
character in a string is refused, and a number is read only as a whole int64. A `\\u` escape
is read as JSON reads it, but a lone surrogate, which UTF-8 cannot hold: the exact path
decides that.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np


def word_table(words: tuple[str, ...]) -> tuple[Any, Any]:
    """`words` as the steps take them (`is_word`, `word_of`): a padded byte matrix and the
    lengths."""
    width = max(map(len, words))
    table = np.zeros((len(words), width), np.uint8)
    for k, word in enumerate(words):
        table[k, : len(word)] = np.frombuffer(word.encode(), np.uint8)
    return table, np.array([len(w) for w in words], np.int64)


_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)
_ONE = np.uint64(1)
#: The bytes a string holds as they are: ASCII from the space on, but the quote and the
#: backslash.
_PLAIN = np.zeros(256, np.bool_)
_PLAIN[32:128] = True
_PLAIN[[34, 92]] = False


@numba.njit(cache=True, nogil=True)
def ws(buf: Any, i: int, e: int) -> int:
    """Past JSON's whitespace from `i`."""
    while i < e and (buf[i] == 32 or buf[i] == 10 or buf[i] == 13 or buf[i] == 9):
        i += 1
    return i


@numba.njit(cache=True, nogil=True)
def fnv(text: Any, s: int, e: int) -> Any:
    """FNV-1a of `text[s:e]`, its top 63 bits (a non-negative int64)."""
    h = _FNV_OFFSET
    for i in range(s, e):
        h = (h ^ np.uint64(text[i])) * _FNV_PRIME
    return np.int64(h >> _ONE)


@numba.njit(cache=True, nogil=True)
def _utf8_tail(lead: int, second: int) -> int:
    """How many continuation bytes follow `lead`, given the byte after it; -1 if `lead`
    leads no sequence Python's strict decoder takes (overlong forms, surrogates and code
    points past U+10FFFF are refused by the second byte's range)."""
    if 0xC2 <= lead <= 0xDF:
        return 1
    if lead == 0xE0:
        return 2 if 0xA0 <= second <= 0xBF else -1  # below: overlong
    if lead == 0xED:
        return 2 if 0x80 <= second <= 0x9F else -1  # above: a surrogate
    if 0xE1 <= lead <= 0xEF:
        return 2
    if lead == 0xF0:
        return 3 if 0x90 <= second <= 0xBF else -1  # below: overlong
    if lead == 0xF4:
        return 3 if 0x80 <= second <= 0x8F else -1  # above: past U+10FFFF
    if 0xF1 <= lead <= 0xF3:
        return 3
    return -1


@numba.njit(cache=True, nogil=True)
def _hex4(buf: Any, i: int, e: int) -> int:
    """The four hexadecimal digits at `buf[i:i + 4]` as a number, or -1."""
    if i + 4 > e:
        return -1
    value = 0
    for k in range(i, i + 4):
        b = buf[k]
        if 48 <= b <= 57:
            digit = b - 48
        elif 97 <= b <= 102:
            digit = b - 87
        elif 65 <= b <= 70:
            digit = b - 55
        else:
            return -1
        value = value * 16 + digit
    return value


@numba.njit(cache=True, nogil=True)
def _unicode_escape(buf: Any, i: int, e: int, out: Any, o: int) -> tuple[int, int, bool]:
    """A `\\uXXXX` escape at `buf[i]` (a surrogate pair as one), its character written as
    UTF-8 at `out[o]` (never longer than the escape): (the index past it, the end in `out`,
    whether it was read). A lone surrogate, which Python's JSON reads and UTF-8 cannot hold,
    is not read: the exact path decides it."""
    code = _hex4(buf, i + 2, e)
    step = 6
    if 0xD800 <= code <= 0xDBFF:
        low = _hex4(buf, i + 8, e) if i + 7 < e and buf[i + 6] == 92 and buf[i + 7] == 117 else -1
        if not 0xDC00 <= low <= 0xDFFF:
            return i, o, False
        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
        step = 12
    elif code < 0 or 0xDC00 <= code <= 0xDFFF:
        return i, o, False
    if code < 0x80:
        out[o] = code
        o += 1
    elif code < 0x800:
        out[o] = 0xC0 | (code >> 6)
        out[o + 1] = 0x80 | (code & 0x3F)
        o += 2
    elif code < 0x10000:
        out[o] = 0xE0 | (code >> 12)
        out[o + 1] = 0x80 | ((code >> 6) & 0x3F)
        out[o + 2] = 0x80 | (code & 0x3F)
        o += 3
    else:
        out[o] = 0xF0 | (code >> 18)
        out[o + 1] = 0x80 | ((code >> 12) & 0x3F)
        out[o + 2] = 0x80 | ((code >> 6) & 0x3F)
        out[o + 3] = 0x80 | (code & 0x3F)
        o += 4
    return i + step, o, True


@numba.njit(cache=True, nogil=True)
def string(buf: Any, i: int, e: int, out: Any, o: int) -> tuple[int, int, bool]:
    """From just past an opening quote: the text unescaped into `out[o:]` (never longer than
    it was escaped). Returns (the index past the closing quote, the end in `out`, whether it
    was read)."""
    while i < e:
        d = buf[i]
        if _PLAIN[d]:  # the common byte first, by one lookup
            out[o] = d
            o += 1
            i += 1
            continue
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
            elif x == 117:
                i, o, good = _unicode_escape(buf, i, e, out, o)
                if not good:
                    return i, o, False
                continue
            else:
                return i, o, False  # anything else: the exact path decides
            o += 1
            i += 2
            continue
        if d < 128:  # a control character
            return i, o, False
        k = _utf8_tail(d, buf[i + 1] if i + 1 < e else 0)
        if k < 0 or i + k >= e:
            return i, o, False
        for q in range(1, k + 1):
            if (buf[i + q] & 0xC0) != 0x80:
                return i, o, False
        for q in range(k + 1):
            out[o + q] = buf[i + q]
        o += k + 1
        i += k + 1
    return i, o, False


@numba.njit(cache=True, nogil=True)
def _digits(buf: Any, j: int, e: int) -> int:
    """Past the decimal digits from `j`."""
    while j < e and 48 <= buf[j] <= 57:
        j += 1
    return j


@numba.njit(cache=True, nogil=True)
def number_end(buf: Any, i: int, e: int) -> tuple[int, bool]:
    """A JSON number from `buf[i]` as its grammar has it: (the index past it, or -1 if it
    is none; whether it is whole: no fraction, no exponent)."""
    j = i + 1 if buf[i] == 45 else i
    if j >= e or not 48 <= buf[j] <= 57:
        return -1, False
    first = j
    j = _digits(buf, j, e)
    if buf[first] == 48 and j - first > 1:
        return -1, False  # "07" is no JSON number
    whole = True
    if j < e and buf[j] == 46:
        k = _digits(buf, j + 1, e)
        if k == j + 1:
            return -1, False
        j, whole = k, False
    if j < e and (buf[j] == 101 or buf[j] == 69):
        j += 1
        if j < e and (buf[j] == 43 or buf[j] == 45):
            j += 1
        k = _digits(buf, j, e)
        if k == j:
            return -1, False
        j, whole = k, False
    return j, whole


@numba.njit(cache=True, nogil=True)
def int64_of(buf: Any, i: int, j: int) -> tuple[int, bool]:
    """The whole number `buf[i:j]` (as `number_end` found it): (its value, whether it fits
    an int64)."""
    negative = buf[i] == 45
    value = 0
    for k in range(i + 1 if negative else i, j):
        digit = buf[k] - 48
        if value > (9223372036854775807 - digit) // 10:
            # -2**63 fits, though its digits without the sign do not
            if negative and k == j - 1 and value == 922337203685477580 and digit == 8:
                return -9223372036854775807 - 1, True
            return 0, False
        value = value * 10 + digit
    return -value if negative else value, True


@numba.njit(cache=True, nogil=True)
def is_word(text: Any, s: int, e: int, words: Any, lengths: Any, w: int) -> bool:
    """Whether `text[s:e]` is word `w` of the padded byte matrix `words`."""
    n = lengths[w]
    if e - s != n:
        return False
    for q in range(n):
        if text[s + q] != words[w, q]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def word_of(text: Any, s: int, e: int, words: Any, lengths: Any, first: int, last: int) -> int:
    """Which of words `first..last-1` `text[s:e]` is, or -1."""
    for w in range(first, last):
        if is_word(text, s, e, words, lengths, w):
            return w
    return -1


@numba.njit(cache=True, nogil=True)
def literal(buf: Any, i: int, e: int, word: Any) -> bool:
    """Whether `buf[i:]` starts with the bytes of `word`."""
    n = word.shape[0]
    if i + n > e:
        return False
    for q in range(n):
        if buf[i + q] != word[q]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def key(buf: Any, i: int, e: int, out: Any, o: int) -> tuple[int, int, bool]:
    """A key and its colon, unescaped at `out[o:]` (the caller drops it after matching):
    (the index of its value, the key's end in `out`, whether it was read)."""
    i = ws(buf, i, e)
    if i >= e or buf[i] != 34:
        return i, o, False
    i, end, good = string(buf, i + 1, e, out, o)
    i = ws(buf, i, e)
    if not good or i >= e or buf[i] != 58:
        return i, end, False
    i = ws(buf, i + 1, e)
    return i, end, i < e


@numba.njit(cache=True, nogil=True)
def next_member(buf: Any, i: int, e: int) -> tuple[int, int]:
    """After a value in an object: (the index past a comma, 1), past the closing brace (0),
    or (i, -1) for anything else."""
    i = ws(buf, i, e)
    if i < e and buf[i] == 44:
        return i + 1, 1
    if i < e and buf[i] == 125:
        return i + 1, 0
    return i, -1


@numba.njit(cache=True, nogil=True)
def container_end(buf: Any, i: int, e: int) -> int:
    """From a '{' or '[': the index past the object or array it opens, by its brackets and
    strings alone, or -1 where it does not close before `e`. Nothing inside is checked: the
    caller compares the bytes with a value the exact path has read (`podd_cdc.dataworks_batch`
    does so with a message's schema)."""
    depth = 0
    while i < e:
        c = buf[i]
        if c == 34:
            i += 1
            while i < e:  # by branches, not `i += 2 if ... else 1`: the next step is
                d = buf[i]  # then guessed before the byte is loaded (2.5 times faster)
                if d == 34:
                    break
                if d == 92:
                    i += 2
                else:
                    i += 1
            if i >= e:
                return -1
        elif c == 123 or c == 91:
            depth += 1
        elif c == 125 or c == 93:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1
