"""Compiled conversions over `podd_cdc.qlik_batch_kernel`'s output, a batch at a time: texts
to hashes (a table's schema id). A prototype for `bench.cdc_columnar`'s measurement; not on
the origin's path."""

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


# `hashes` inlines `podd_cdc.json_scan.fnv`: its cache must follow that file too.
drop_if_sources_changed([hashes], [__file__, json_scan.__file__])
