"""Compiled conversions over `podd_cdc.qlik_batch_kernel`'s output, a batch at a time: texts
to hashes (a table's schema id), and Qlik's `changeSequence` to two integers that sort as it
does. A prototype for `bench.cdc_columnar`'s measurement; not on the origin's path."""

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


# `hashes` inlines `podd_cdc.json_scan.fnv`: its cache must follow that file too.
drop_if_sources_changed([hashes], [__file__, json_scan.__file__])
