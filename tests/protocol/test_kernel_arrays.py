"""`protocol.kernel_arrays.unowned`: a compiled step reads and writes the memory of the array
it was made of, in either order, and a view that is not contiguous is handed on as it is;
`pointer`: a step indexes the array's memory through it, and only a contiguous array's."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import pytest

from protocol.kernel_arrays import _data, pointer, unowned


@numba.njit
def _doubled_plus_row(source: Any, target: Any) -> None:
    """A step: every element of `source`, doubled and plus its row, into the same place of
    `target` (the row: so that a wrong order moves values, not only places)."""
    for i in range(source.shape[0]):
        for j in range(source.shape[1]):
            target[i, j] = source[i, j] * 2 + i


@numba.njit
def _doubled_1d(source: Any, target: Any) -> None:
    for k in range(source.shape[0]):
        target[k] = source[k] * 2


@numba.njit
def _entry_2d(source: Any, target: Any) -> None:
    _doubled_plus_row(unowned(source), unowned(target))


@numba.njit
def _entry_1d(source: Any, target: Any) -> None:
    _doubled_1d(unowned(source), unowned(target))


@numba.njit
def _first_through_pointer(array: Any) -> Any:
    return _data(array)[0]


@numba.njit
def _doubled_n(source: Any, target: Any, n: int) -> None:
    for k in range(n):
        target[k] = source[k] * 2


@numba.njit
def _entry_pointers(source: Any, target: Any) -> None:
    _doubled_n(pointer(source), pointer(target), source.shape[0])


def test_a_step_reads_and_writes_the_arrays_through_their_pointers() -> None:
    source = np.arange(5, dtype=np.uint8) + 250  # 254 doubled wraps, as in the array
    target = np.zeros(6, np.uint8)
    _entry_pointers(source, target)
    assert target.tolist() == [244, 246, 248, 250, 252, 0]
    with pytest.raises(numba.core.errors.TypingError, match="a contiguous array"):
        _entry_pointers(source[::2], target[::2])
    assert pointer(source) is source  # called from Python: the array itself


def test_a_row_ordered_matrix_is_the_same_memory() -> None:
    source = np.arange(12, dtype=np.int64).reshape(3, 4)
    target = np.zeros((3, 4), np.int64)
    _entry_2d(source, target)
    assert (target == source * 2 + np.arange(3)[:, None]).all()


def test_a_column_ordered_matrix_keeps_its_order() -> None:
    """A transposed matrix is Fortran-ordered: read as rows, its elements would be read
    from, and written to, the wrong places."""
    source = np.arange(12, dtype=np.int64).reshape(4, 3).T  # F-contiguous, 3x4
    target = np.zeros((4, 3), np.int64).T
    assert source.flags.f_contiguous
    assert not source.flags.c_contiguous
    _entry_2d(source, target)
    assert (target == source * 2 + np.arange(3)[:, None]).all()


def test_a_strided_view_is_handed_on_as_it_is() -> None:
    whole = np.arange(20, dtype=np.int64)
    target = np.zeros(20, np.int64)
    _entry_1d(whole[::2], target[::2])
    assert (target[::2] == whole[::2] * 2).all()
    assert (target[1::2] == 0).all()  # nothing written between the view's elements


def test_a_pointer_is_made_of_contiguous_arrays_only() -> None:
    assert _first_through_pointer(np.array([7, 8], np.int64)) == 7
    with pytest.raises(numba.core.errors.TypingError, match="a contiguous array"):
        _first_through_pointer(np.arange(6, dtype=np.int64)[::2])


def test_called_from_python_it_is_the_array() -> None:
    array = np.zeros(3)
    assert unowned(array) is array
