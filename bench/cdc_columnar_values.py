"""Compiled conversions over `podd_cdc.qlik_batch_kernel`'s output, a batch at a time: texts
to hashes (a table's or a column's name), Qlik's `changeSequence` to two integers that sort as
it does, and DATE and DATETIME texts to Avro's days and microseconds. A prototype for
`bench.cdc_columnar`'s measurement; not on the origin's path."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from podd_cdc import json_scan
from podd_cdc.json_scan import fnv
from protocol.kernel_cache import drop_if_sources_changed


@numba.njit(cache=True, nogil=True)
def hashes(text: Any, starts: Any, ends: Any) -> Any:
    """The kernel's key hash (`podd_cdc.json_scan.fnv`) of each `text[starts[k]:ends[k]]`."""
    out = np.empty(starts.shape[0], np.int64)
    for k in range(starts.shape[0]):
        out[k] = fnv(text, starts[k], ends[k])
    return out


def hash_of(name: str) -> int:
    data = np.frombuffer(name.encode(), np.uint8)
    return int(hashes(data, np.zeros(1, np.int64), np.array([len(data)], np.int64))[0])


@numba.njit(cache=True, nogil=True)
def _digits(text: Any, s: int, n: int) -> int:
    """`n` decimal digits from `text[s]` (at most 19), or -1."""
    value = 0
    for i in range(s, s + n):
        d = int(text[i]) - 48
        if d < 0 or d > 9:
            return -1
        value = value * 10 + d
    return value


@numba.njit(cache=True, nogil=True)
def sequences(text: Any, starts: Any, ends: Any, high: Any, low: Any, good: Any) -> None:
    """A 35-digit `changeSequence` as (its first 16 digits, its last 19): they sort as the
    sequence does."""
    for k in range(starts.shape[0]):
        s = starts[k]
        ok = ends[k] - s == 35
        high[k] = _digits(text, s, 16) if ok else -1
        low[k] = _digits(text, s + 16, 19) if ok else -1
        good[k] = ok and high[k] >= 0 and low[k] >= 0


@numba.njit(cache=True, nogil=True)
def _days(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date."""
    y -= 1 if m <= 2 else 0
    era = (y if y >= 0 else y - 399) // 400
    of_era = y - era * 400
    of_year = (153 * ((m + 9) % 12) + 2) // 5 + d - 1
    return era * 146097 + of_era * 365 + of_era // 4 - of_era // 100 + of_year - 719468


@numba.njit(cache=True, nogil=True)
def times(text: Any, starts: Any, ends: Any, with_time: bool, out: Any, good: Any) -> None:
    """DATE `YYYY-MM-DD` to days, or DATETIME `YYYY-MM-DD HH:MM:SS[.f]` (0 to 6 digits) to
    microseconds since the epoch. (Days of the month are checked to 31 only: a prototype.)"""
    for k in range(starts.shape[0]):
        s, n = starts[k], ends[k] - starts[k]
        out[k], good[k] = 0, False
        if n != 10 and (not with_time or n < 19 or n > 26):
            continue  # no byte is read outside the text
        if text[s + 4] != 45 or text[s + 7] != 45:
            continue
        y, mo, d = _digits(text, s, 4), _digits(text, s + 5, 2), _digits(text, s + 8, 2)
        ok = y >= 1 and 1 <= mo <= 12 and 1 <= d <= 31
        days = _days(y, mo, d) if ok else 0
        if not with_time:
            out[k], good[k] = days, ok
            continue
        ok = ok and n >= 19 and text[s + 10] == 32 and text[s + 13] == 58 and text[s + 16] == 58
        if not ok:
            continue
        hh, mi, ss = _digits(text, s + 11, 2), _digits(text, s + 14, 2), _digits(text, s + 17, 2)
        ok = 0 <= hh <= 23 and 0 <= mi <= 59 and 0 <= ss <= 59
        fraction = 0
        if ok and n > 19:
            places = n - 20
            ok = text[s + 19] == 46 and 1 <= places <= 6
            fraction = _digits(text, s + 20, places) if ok else 0
            ok = ok and fraction >= 0
            for _ in range(6 - places):
                fraction *= 10
        out[k] = ((days * 24 + hh) * 60 + mi) * 60_000_000 + ss * 1_000_000 + fraction
        good[k] = ok


# `hashes` inlines `podd_cdc.json_scan.fnv`: its cache must follow that file too.
drop_if_sources_changed([hashes], [__file__, json_scan.__file__])
