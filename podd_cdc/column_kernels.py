"""Compiled checks and conversions of a batch's text values (`podd_cdc.qlik_columns`), each
as strict as the exact path's converter (`podd_cdc.values`) or stricter: a value one of them
is not sure of is marked not good, and its message goes to the exact path.

- `texts`: a text fits its column (at most so many characters and bytes, no NUL);
- `dates`: `YYYY-MM-DD` to days since 1970-01-01;
- `timestamps`: `YYYY-MM-DD HH:MM:SS` (or with `T`), with 1 to 6 fraction digits or none, to
  microseconds since 1970-01-01. No zone, no surrounding space: the exact path takes those.

A kernel that passes its text to a step per value hands it on as a `pointer`
(`protocol.kernel_arrays`): every text array is C-contiguous, and every step reads only
within the bounds it is given.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from podd_cdc import json_scan
from podd_cdc.json_scan import fnv, word_of
from protocol import kernel_arrays
from protocol.kernel_arrays import pointer
from protocol.kernel_cache import drop_if_sources_changed


@numba.njit(cache=True, nogil=True)
def texts(out: Any, starts: Any, ends: Any, chars: int, max_bytes: int, good: Any) -> None:
    """Whether each `out[starts[k]:ends[k]]` (valid UTF-8) has at most `chars` characters
    (-1: any number) and `max_bytes` bytes, and no NUL."""
    for k in range(starts.shape[0]):
        s, e = starts[k], ends[k]
        ok = e - s <= max_bytes
        count = 0
        for i in range(s, e if ok else s):
            b = out[i]
            if b == 0:
                ok = False
                break
            count += (b & 0xC0) != 0x80  # a character begins at every byte but a continuation
        good[k] = ok and (chars < 0 or count <= chars)


@numba.njit(cache=True, nogil=True)
def _digits(text: Any, s: int, n: int) -> int:
    """`n` decimal digits from `text[s]` (at most 18), or -1."""
    value = 0
    for i in range(s, s + n):
        d = int(text[i]) - 48
        if d < 0 or d > 9:
            return -1
        value = value * 10 + d
    return value


@numba.njit(cache=True, nogil=True)
def _month_days(y: int, m: int) -> int:
    if m == 2:
        return 29 if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else 28
    return 30 if m == 4 or m == 6 or m == 9 or m == 11 else 31


@numba.njit(cache=True, nogil=True)
def _days(text: Any, s: int) -> tuple[int, bool]:
    """Days since 1970-01-01 of the `YYYY-MM-DD` at `text[s]` (10 bytes there), and whether
    it is a date."""
    if text[s + 4] != 45 or text[s + 7] != 45:
        return 0, False
    y, m, d = _digits(text, s, 4), _digits(text, s + 5, 2), _digits(text, s + 8, 2)
    if y < 1 or not 1 <= m <= 12 or d < 1 or d > _month_days(y, m):
        return 0, False
    y -= 1 if m <= 2 else 0
    of_era = y % 400
    era = (y - of_era) // 400
    of_year = (153 * ((m + 9) % 12) + 2) // 5 + d - 1
    of_era_days = of_era * 365 + of_era // 4 - of_era // 100 + of_year
    return era * 146097 + of_era_days - 719468, True


@numba.njit(cache=True, nogil=True)
def dates(given: Any, starts: Any, ends: Any, values: Any, good: Any) -> None:
    """Each `YYYY-MM-DD` text as days since 1970-01-01 into `values`."""
    text = pointer(given)
    for k in range(starts.shape[0]):
        values[k], good[k] = 0, False
        if ends[k] - starts[k] == 10:
            values[k], good[k] = _days(text, starts[k])


@numba.njit(cache=True, nogil=True)
def _of_day(text: Any, s: int, n: int) -> tuple[int, bool]:
    """Microseconds of the day of the `HH:MM:SS[.f]` (1 to 6 fraction digits) that is
    `text[s:s + n]`, and whether it is one."""
    if n < 8 or n == 9 or n > 15 or text[s + 2] != 58 or text[s + 5] != 58:
        return 0, False
    hh, mi, ss = _digits(text, s, 2), _digits(text, s + 3, 2), _digits(text, s + 6, 2)
    if not (0 <= hh <= 23 and 0 <= mi <= 59 and 0 <= ss <= 59):
        return 0, False
    fraction = 0
    if n > 8:
        fraction = _digits(text, s + 9, n - 9)
        if text[s + 8] != 46 or fraction < 0:
            return 0, False
        for _ in range(15 - n):
            fraction *= 10
    return ((hh * 60 + mi) * 60 + ss) * 1_000_000 + fraction, True


@numba.njit(cache=True, nogil=True)
def timestamps(given: Any, starts: Any, ends: Any, values: Any, good: Any) -> None:
    """Each `YYYY-MM-DD HH:MM:SS[.f]` text as microseconds since 1970-01-01 into `values`."""
    text = pointer(given)
    for k in range(starts.shape[0]):
        s, n = starts[k], ends[k] - starts[k]
        values[k], good[k] = 0, False
        if n < 19 or n > 26 or (text[s + 10] != 32 and text[s + 10] != 84):
            continue  # no byte is read outside the text
        days, ok = _days(text, s)
        micros, timed = _of_day(text, s + 11, n - 11)
        if ok and timed:
            values[k], good[k] = days * 86_400_000_000 + micros, True


@numba.njit(cache=True, nogil=True)
def integers(given: Any, starts: Any, ends: Any, values: Any, good: Any) -> None:
    """Each `[+-]digits` text (no space; 1 to 19 digits, within +-(2**63 - 1)) as its
    integer."""
    text = pointer(given)
    for k in range(starts.shape[0]):
        s, e = starts[k], ends[k]
        values[k], good[k] = 0, False
        sign = 1
        if s < e and (text[s] == 43 or text[s] == 45):
            sign = -1 if text[s] == 45 else 1
            s += 1
        if not 1 <= e - s <= 19:
            continue  # a longer one is the exact path's
        value = _digits(text, s, min(e - s, 18))
        if value >= 0 and e - s == 19:
            last = int(text[e - 1]) - 48
            if not 0 <= last <= 9 or value > (9223372036854775807 - last) // 10:
                continue  # past int64 (-2**63 too): the exact path's
            value = value * 10 + last
        if value >= 0:
            values[k], good[k] = sign * value, True


@numba.njit(cache=True, nogil=True)
def _lower_is(text: Any, s: int, e: int, word: Any) -> bool:
    if e - s != word.shape[0]:
        return False
    for q in range(e - s):
        if text[s + q] | 32 != word[q]:  # ASCII letters to lower case; digits unchanged
            return False
    return True


@numba.njit(cache=True, nogil=True)
def booleans(given: Any, starts: Any, ends: Any, words: Any, values: Any, good: Any) -> None:
    """Each `true`, `false` (any case), `1` or `0` text as 1 or 0. `words` holds `true`,
    `false` as bytes, one a row (padded with 0)."""
    text = pointer(given)
    for k in range(starts.shape[0]):
        s, e = starts[k], ends[k]
        values[k], good[k] = 0, False
        if e - s == 1 and (text[s] == 48 or text[s] == 49):
            values[k], good[k] = text[s] - 48, True
        elif _lower_is(text, s, e, words[0, :4]):
            values[k], good[k] = 1, True
        elif _lower_is(text, s, e, words[1, :5]):
            good[k] = True


@numba.njit(cache=True, nogil=True)
def times_of_day(given: Any, starts: Any, ends: Any, values: Any, good: Any) -> None:
    """Each `HH:MM:SS[.f]` text (1 to 6 fraction digits) as microseconds of its day."""
    text = pointer(given)
    for k in range(starts.shape[0]):
        values[k], good[k] = _of_day(text, starts[k], ends[k] - starts[k])


@numba.njit(cache=True, nogil=True)
def _hex_digit(b: int) -> bool:
    return 48 <= b <= 57 or 65 <= b <= 70 or 97 <= b <= 102


@numba.njit(cache=True, nogil=True)
def hex_texts(text: Any, starts: Any, ends: Any, good: Any) -> None:
    """Whether each text is hexadecimal: an even number of hex digits."""
    for k in range(starts.shape[0]):
        s, e = starts[k], ends[k]
        ok = (e - s) % 2 == 0
        for i in range(s, e if ok else s):
            if not _hex_digit(text[i]):
                ok = False
                break
        good[k] = ok


@numba.njit(cache=True, nogil=True)
def _base64_digit(b: int) -> bool:
    return 65 <= b <= 90 or 97 <= b <= 122 or 48 <= b <= 57 or b == 43 or b == 47


@numba.njit(cache=True, nogil=True)
def base64_texts(text: Any, starts: Any, ends: Any, good: Any) -> None:
    """Whether each text is base64 in its plainest form, which `base64.b64decode(text,
    validate=True)` always takes: a multiple of four characters, each of the alphabet
    (`A-Z a-z 0-9 + /`) but one or two `=` at the end. Another the exact path may take."""
    for k in range(starts.shape[0]):
        s, e = starts[k], ends[k]
        ok = (e - s) % 4 == 0
        pad = 0
        if ok and e > s and text[e - 1] == 61:
            pad = 2 if text[e - 2] == 61 else 1
        for i in range(s, e - pad if ok else s):
            if not _base64_digit(text[i]):
                ok = False
                break
        good[k] = ok


@numba.njit(cache=True, nogil=True)
def decimals(text: Any, starts: Any, ends: Any, good: Any) -> None:
    """Whether each text is a decimal number `[+-](d+[.d*] | .d+)`, no space."""
    for k in range(starts.shape[0]):
        s, e = starts[k], ends[k]
        if s < e and (text[s] == 43 or text[s] == 45):
            s += 1
        whole = s
        while s < e and 48 <= text[s] <= 57:
            s += 1
        digits = s - whole
        if s < e and text[s] == 46:
            s += 1
            point = s
            while s < e and 48 <= text[s] <= 57:
                s += 1
            digits += s - point
        good[k] = s == e and digits > 0


@numba.njit(cache=True, nogil=True)
def same_texts(text: Any, starts: Any, ends: Any, names: Any, bounds: Any, which: Any) -> None:
    """Where `text[starts[k]:ends[k]]` is not name `which[k]` (`names[bounds[w]:bounds[w+1]]`),
    `which[k]` becomes -1; -1 stays -1."""
    text_bytes, name_bytes = pointer(text), pointer(names)
    for k in range(starts.shape[0]):
        w = which[k]
        if w < 0:
            continue
        s, b, n = starts[k], bounds[w], bounds[w + 1] - bounds[w]
        if ends[k] - s != n:
            which[k] = -1
            continue
        # Every byte, with no exit at the first that differs, through pointers (no negative
        # index to wrap): the loop vectorises. 1,200-byte schemas: 0.14 ns a byte, not 0.76.
        differs = np.uint8(0)
        for q in range(n):
            differs |= text_bytes[s + q] ^ name_bytes[b + q]
        if differs:
            which[k] = -1


@numba.njit(cache=True, nogil=True)
def field_columns(keys: Any, table: Any, plan_keys: Any, plan_columns: Any, table_of: Any) -> Any:
    """For each field of key `keys[k]` (its name's hash mixed with its table, `table[k]`):
    the column its key names, -1 for none. The column is found by the key among the sorted
    `plan_keys` (a binary search; `plan_columns[j]` is the column of key `plan_keys[j]`),
    and taken only where it is of that table; its name is the caller's to compare
    (`same_texts`: a hash can be made to collide)."""
    found = np.full(keys.shape[0], -1, np.int64)
    for k in range(keys.shape[0]):
        lo, hi = 0, plan_keys.shape[0]
        while lo < hi:
            mid = (lo + hi) // 2
            if plan_keys[mid] < keys[k]:
                lo = mid + 1
            else:
                hi = mid
        if lo < plan_keys.shape[0] and plan_keys[lo] == keys[k]:
            c = plan_columns[lo]
            if table_of[c] == table[k]:
                found[k] = c
    return found


@numba.njit(cache=True, nogil=True)
def _clock(text: Any, s: int) -> bool:
    """Whether the 16 digits at `text[s]` are a time `YYYYMMDDHHmmSShh`, as `strptime`
    and `datetime` take one (year 1 to 9999, a day of its month, second at most 59)."""
    y, m, d = _digits(text, s, 4), _digits(text, s + 4, 2), _digits(text, s + 6, 2)
    hh, mi, ss = _digits(text, s + 8, 2), _digits(text, s + 10, 2), _digits(text, s + 12, 2)
    if y < 1 or not 1 <= m <= 12 or d < 1 or d > _month_days(y, m):
        return False
    return 0 <= hh <= 23 and 0 <= mi <= 59 and 0 <= ss <= 59 and _digits(text, s + 14, 2) >= 0


@numba.njit(cache=True, nogil=True)
def sequences(given: Any, starts: Any, ends: Any, high: Any, low: Any, good: Any) -> None:
    """Each Qlik `changeSequence` (35 digits, the first 16 a time) as two integers that sort
    as it does: its first 17 digits and its last 18 (each fits an int64)."""
    text = pointer(given)
    for k in range(starts.shape[0]):
        s = starts[k]
        high[k], low[k], good[k] = 0, 0, False
        if ends[k] - s != 35 or not _clock(text, s):
            continue
        first, last = _digits(text, s, 17), _digits(text, s + 17, 18)
        if first >= 0 and last >= 0:
            high[k], low[k], good[k] = first, last, True


@numba.njit(cache=True, nogil=True)
def operations(text: Any, starts: Any, ends: Any, words: Any, lengths: Any, codes: Any) -> None:
    """Each text's index among `words` (a padded byte matrix, `json_scan.word_table`), or
    -1."""
    for k in range(starts.shape[0]):
        codes[k] = word_of(text, starts[k], ends[k], words, lengths, 0, words.shape[0])


@numba.njit(cache=True, nogil=True)
def text_hashes(given: Any, starts: Any, ends: Any) -> Any:
    """`json_scan.fnv` of each `text[starts[k]:ends[k]]`."""
    text = pointer(given)
    found = np.empty(starts.shape[0], np.int64)
    for k in range(starts.shape[0]):
        found[k] = fnv(text, starts[k], ends[k])
    return found


# The kernels inline `protocol.kernel_arrays`, `text_hashes` and `operations` also
# `podd_cdc.json_scan`'s steps: their caches must follow those files too.
drop_if_sources_changed(
    [
        integers,
        dates,
        timestamps,
        times_of_day,
        booleans,
        sequences,
        operations,
        text_hashes,
        same_texts,
    ],
    [__file__, json_scan.__file__, kernel_arrays.__file__],
)
