"""The identities of the changes a cutter on arrays holds (`podd_cdc.qlik_held`,
`podd_cdc.dataworks_held`), kept as one sorted array, not a Python set.

An identity is a row of a few int64 numbers (Qlik: a sequence's pair; DataWorks: its order's
pair and the operation's code), ordered as tuples of them are. A set of Python numbers or
tuples cost the Qlik cutter about 1 µs a change: a Python object made, hashed and stored
for every change fed, and again for every change taken. Here a feed sorts its identities
(`numpy.lexsort`, stable), finds each among the held ones by a binary search, and merges the
new ones in place from the end, so that only the held rows above the smallest new one move
(a topic's sequences mostly grow: few do).

The comparison is exact, of every number: no hash stands for an identity, so two changes
that differ are never taken for copies of each other, whatever a topic sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np

from protocol import kernel_arrays
from protocol.kernel_arrays import unowned
from protocol.kernel_cache import defined_here, drop_if_sources_changed


class IdentityRows:
    """A set of identities of `width` int64 numbers each."""

    def __init__(self, width: int) -> None:
        self._buffer = np.zeros((_FIRST_ROOM, width), np.int64)  # its first rows: sorted
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __contains__(self, identity: object) -> bool:
        """Whether `identity`, a tuple of `width` ints, is held (anything else is not)."""
        width = self._buffer.shape[1]
        if not (
            isinstance(identity, tuple)
            and len(identity) == width
            and all(type(n) is int and -(2**63) <= n < 2**63 for n in identity)
        ):
            return False
        return bool(_found(self._rows, np.array([identity], np.int64)))

    @property
    def _rows(self) -> Any:
        return self._buffer[: self._count]

    def add_new(self, columns: Sequence[Any]) -> Any:
        """The identities given as `columns` (one array a number), in their order: which
        are new (neither held nor given earlier in `columns`); those are held now."""
        keys = self._keys(columns)
        if not len(keys):
            return np.zeros(0, np.bool_)
        order = _order(keys)
        fresh = np.empty(len(keys), np.bool_)
        added = _fresh(self._rows, keys, order, fresh)
        if self._count + added > len(self._buffer):
            room = max(2 * len(self._buffer), self._count + added)
            grown = np.zeros((room, self._buffer.shape[1]), np.int64)
            grown[: self._count] = self._rows
            self._buffer = grown
        _insert(self._buffer, self._count, keys, order, fresh, added)
        self._count += added
        return fresh

    def discard(self, columns: Sequence[Any]) -> None:
        """Hold none of the identities given as `columns` any longer."""
        keys = self._keys(columns)
        if len(keys) and self._count:
            self._count = _drop(self._buffer, self._count, keys)
            if self._count < len(self._buffer) // 4 and len(self._buffer) > _FIRST_ROOM:
                self._buffer = self._buffer[: max(2 * self._count, _FIRST_ROOM)].copy()

    def _keys(self, columns: Sequence[Any]) -> Any:
        width = self._buffer.shape[1]
        if len(columns) != width:
            raise ValueError(f"an identity has {width} numbers, not {len(columns)}")
        keys = np.empty((len(columns[0]) if width else 0, width), np.int64)
        for c, column in enumerate(columns):
            keys[:, c] = column
        return keys


#: Rows a set has room for at first; it doubles as it needs (and shrinks when a quarter full).
_FIRST_ROOM = 1024


def _order(keys: Any) -> Any:
    """`keys`' rows in their order as tuples, equal rows in the order given (lexsort is
    stable)."""
    return np.lexsort(keys.T[::-1]).astype(np.int64)


@numba.njit(cache=True, nogil=True)
def _compare(a: Any, i: int, b: Any, j: int) -> int:
    """Row `a[i]` against row `b[j]`, as tuples: -1, 0 or 1."""
    for c in range(a.shape[1]):
        x, y = a[i, c], b[j, c]
        if x != y:
            return -1 if x < y else 1
    return 0


@numba.njit(cache=True, nogil=True)
def _lower_bound_steps(rows: Any, keys: Any, k: int, lo: int, hi: int) -> int:
    """The first of the sorted `rows[lo:hi]` not below `keys[k]` (`hi` if none is)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if _compare(rows, mid, keys, k) < 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def _fresh_steps(rows: Any, keys: Any, order: Any, fresh: Any) -> int:
    """Into `fresh`, whether each key is new: not in the sorted `rows`, nor an earlier row
    of `keys` (by `order`, their sorted order, which keeps equal rows as given). How many
    are."""
    j, added = 0, 0
    for t in range(order.shape[0]):
        k = order[t]
        if t > 0 and _compare(keys, k, keys, order[t - 1]) == 0:
            fresh[k] = False
            continue
        j = _lower_bound_steps(rows, keys, k, j, rows.shape[0])
        fresh[k] = j == rows.shape[0] or _compare(rows, j, keys, k) != 0
        added += fresh[k]
    return added


@numba.njit(cache=True, nogil=True)
def _insert_steps(buffer: Any, count: int, keys: Any, order: Any, fresh: Any, added: int) -> None:
    """The `added` fresh keys merged into the sorted `buffer[:count]` in place, from the
    end (`buffer` has room): only the rows above the smallest of them move."""
    w, i, t = count + added - 1, count - 1, order.shape[0] - 1
    while t >= 0 and w > i:
        k = order[t]
        if not fresh[k]:
            t -= 1
        elif i >= 0 and _compare(buffer, i, keys, k) > 0:
            buffer[w] = buffer[i]
            i -= 1
            w -= 1
        else:
            buffer[w] = keys[k]
            t -= 1
            w -= 1


@numba.njit(cache=True, nogil=True)
def _drop_steps(buffer: Any, count: int, keys: Any) -> int:
    """The rows `keys` holds taken out of the sorted `buffer[:count]`, the rest closed up
    in order: how many rows are left."""
    keep = np.ones(count, np.bool_)
    for k in range(keys.shape[0]):
        j = _lower_bound_steps(buffer, keys, k, 0, count)
        if j < count and _compare(buffer, j, keys, k) == 0:
            keep[j] = False
    left = 0
    for j in range(count):
        if keep[j]:
            if left != j:
                buffer[left] = buffer[j]
            left += 1
    return left


@numba.njit(cache=True, nogil=True)
def _fresh(rows: Any, keys: Any, order: Any, fresh: Any) -> int:
    return _fresh_steps(unowned(rows), unowned(keys), unowned(order), unowned(fresh))


@numba.njit(cache=True, nogil=True)
def _insert(buffer: Any, count: int, keys: Any, order: Any, fresh: Any, added: int) -> None:
    _insert_steps(unowned(buffer), count, unowned(keys), unowned(order), unowned(fresh), added)


@numba.njit(cache=True, nogil=True)
def _drop(buffer: Any, count: int, keys: Any) -> int:
    return _drop_steps(unowned(buffer), count, unowned(keys))


@numba.njit(cache=True, nogil=True)
def _found(rows: Any, key: Any) -> bool:
    """Whether the sorted `rows` hold the row `key[0]`."""
    at = _lower_bound_steps(unowned(rows), unowned(key), 0, 0, rows.shape[0])
    return at < rows.shape[0] and _compare(unowned(rows), at, unowned(key), 0) == 0


# The entry points (`_fresh`, `_insert`, `_drop`, `_found`) hand their steps the arrays
# `unowned` (a comparison a row pair would otherwise count references twice): their caches
# follow `protocol.kernel_arrays` too.
drop_if_sources_changed(defined_here(globals()), [__file__, kernel_arrays.__file__])
