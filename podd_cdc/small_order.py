"""Sorting small non-negative integers (a column's way of conversion, a partition number)
stably, in linear time."""

from __future__ import annotations

from typing import Any

import numpy as np


def stable_order(values: Any, upper: int) -> Any:
    """The indexes that sort `values` (integers in `0..upper`) stably: what
    `numpy.argsort(values, kind="stable")` gives. numpy sorts integers of 16 bits or fewer
    by radix, in linear time, and 64-bit ones by a merge sort: 4 ms against 23 for the
    640,000 fields of a fetch of 32,000 Qlik messages."""
    if 0 <= upper < 2**16:
        values = values.astype(np.uint16)
    return np.argsort(values, kind="stable")
