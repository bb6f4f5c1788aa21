"""A JSON object of a row's fields read into lines of `fields`, one a field: the layout the
batch readers share (`podd_cdc.qlik_batch_kernel`, `podd_cdc.dataworks_batch_kernel`) and
`podd_cdc.qlik_columns` turns into columns. Compiled steps (numba), strict as
`podd_cdc.json_scan`'s are: a row is read only as JSON reads it, with no key given twice and
no value deeper than a field; anything else is left to the exact decoder."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from podd_cdc import json_scan
from podd_cdc.json_scan import fnv, int64_of, key, literal, next_member, number_end, string, ws
from protocol.kernel_cache import defined_here, drop_if_sources_changed

# A field's value kind: V_BOOL holds 1 or 0 as an integer; V_NUMBER is a JSON number that is
# not an int64 (a fraction, an exponent, a larger whole number), kept as its text.
V_NULL, V_INT, V_STR, V_BOOL, V_NUMBER = range(5)
# Columns of `fields`: one line a field of a row.
F_MSG, F_SIDE, F_KEY0, F_KEY1, F_HASH, F_KIND, F_INT, F_STR0, F_STR1 = range(9)
FIELD_COLUMNS = 9
NULL = np.frombuffer(b"null", np.uint8)
TRUE = np.frombuffer(b"true", np.uint8)
FALSE = np.frombuffer(b"false", np.uint8)
#: Fields of a row checked for a repeated key pair by pair; more are sorted by hash.
PAIRWISE = 16


@numba.njit(cache=True, nogil=True)
def distinct(fields: Any, f0: int, f1: int) -> bool:
    """Whether the keys of fields `f0..f1-1` differ. Judged by hash: two keys that only
    share one are taken as the same, and the message goes to the exact path."""
    n = f1 - f0
    if n <= PAIRWISE:
        for a in range(f0, f1):
            for b in range(a + 1, f1):
                if fields[a, F_HASH] == fields[b, F_HASH]:
                    return False
        return True
    ordered = np.sort(fields[f0:f1, F_HASH])
    for a in range(1, n):
        if ordered[a] == ordered[a - 1]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def opened(buf: Any, i: int, e: int) -> tuple[int, bool]:
    """From just past a '{': (the index past '}' if the object is empty, else of its first
    key; whether it is empty)."""
    j = ws(buf, i, e)
    if j < e and buf[j] == 125:
        return j + 1, True
    return j, False


@numba.njit(cache=True, nogil=True)
def number_field(buf: Any, i: int, e: int, out: Any, o: int, field: Any) -> tuple[int, int, bool]:
    """A number in a row into `field`: an int64 as one, any other as its text in `out`.
    Returns (the index past it, the end in `out`, whether it is a JSON number)."""
    end, whole = number_end(buf, i, e)
    if end < 0:
        return i, o, False
    value, fits = int64_of(buf, i, end) if whole else (0, False)
    if fits:
        field[F_KIND] = V_INT
        field[F_INT] = value
        return end, o, True
    field[F_KIND] = V_NUMBER
    field[F_STR0] = o
    for k in range(i, end):
        out[o] = buf[k]
        o += 1
    field[F_STR1] = o
    return end, o, True


@numba.njit(cache=True, nogil=True)
def row(
    buf: Any, i: int, e: int, out: Any, o: int, m: int, side: int, fields: Any, f: int
) -> tuple[int, int, int, bool]:
    """A row's fields, from just past its '{': (index, out end, fields end, read)."""
    i, empty = opened(buf, i, e)
    if empty:
        return i, o, f, True
    f0 = f
    more = 1
    while more == 1:
        key0 = o
        i, o, good = key(buf, i, e, out, o)
        if not good or f >= fields.shape[0]:
            return i, o, f, False
        fields[f, :] = 0  # a field's every column set: `fields` comes uninitialised
        fields[f, F_MSG] = m
        fields[f, F_SIDE] = side
        fields[f, F_KEY0] = key0
        fields[f, F_KEY1] = o
        fields[f, F_HASH] = fnv(out, key0, o)
        c = buf[i]
        if c == 34:
            start = o
            i, o, good = string(buf, i + 1, e, out, o)
            fields[f, F_KIND] = V_STR
            fields[f, F_STR0] = start
            fields[f, F_STR1] = o
        elif c == 45 or 48 <= c <= 57:
            i, o, good = number_field(buf, i, e, out, o, fields[f])
        elif literal(buf, i, e, NULL):
            fields[f, F_KIND] = V_NULL
            i += 4
        elif literal(buf, i, e, TRUE) or literal(buf, i, e, FALSE):
            fields[f, F_KIND] = V_BOOL
            fields[f, F_INT] = c == 116
            i += 4 if c == 116 else 5
        else:
            good = False
        if not good:
            return i, o, f, False
        f += 1
        i, more = next_member(buf, i, e)
    return i, o, f, more == 0 and distinct(fields, f0, f)


# The steps inline `podd_cdc.json_scan`'s: their caches must follow that file too.
drop_if_sources_changed(defined_here(globals()), [__file__, json_scan.__file__])
