"""Qlik transaction ids as numbers, for the changes held on arrays (`podd_cdc.qlik_held`):
the same id, the same code, across batches, for as long as a change of it is held.

An id is a text a message gives (`transactionId`). A batch's ids are grouped by hash and
each group's first id is looked up once; every id is then compared with that one by its
bytes, and one that only shares its hash (a forged collision) is looked up by itself. A
code whose transaction a cut took is forgotten (`forget`): the ids remembered are those
of the changes held, so they are bounded as the changes held are. A change of that id read
later gets a new code, as the cutter then holds it in a new group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podd_cdc.qlik_batch import distinct_texts


class TransactionCodes:
    def __init__(self) -> None:
        self._codes: dict[bytes, int] = {}
        self._ids: dict[int, bytes] = {}
        self._next = 0

    def __len__(self) -> int:
        return len(self._codes)

    @property
    def issued(self) -> int:
        """Codes given so far: a code at or above an earlier `issued` is new since."""
        return self._next

    def codes(self, out: Any, starts: Any, ends: Any, given: Any) -> Any:
        """The code of each id `out[starts[k]:ends[k]]`; -1 where none is `given`."""
        codes = np.full(len(starts), -1, np.int64)
        lines = np.nonzero(given)[0]
        if not len(lines):
            return codes
        starts, ends = starts[lines], ends[lines]
        first, same = distinct_texts(out, starts, ends)
        found = np.array([self._code(out[starts[k] : ends[k]]) for k in first.tolist()])
        codes[lines] = found[np.maximum(same, 0)]
        for k in np.nonzero(same < 0)[0].tolist():
            codes[lines[k]] = self._code(out[starts[k] : ends[k]])
        return codes

    def forget(self, codes: Any) -> None:
        """Transactions a cut took: their ids are no longer held."""
        for code in np.unique(codes[codes >= 0]).tolist():
            text = self._ids.pop(code, None)
            if text is not None:
                del self._codes[text]

    def _code(self, text: Any) -> int:
        key = text.tobytes()
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = self._next
            self._ids[code] = key
            self._next += 1
        return code
