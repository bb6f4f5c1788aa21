"""The identities a cutter on arrays holds (`podd_cdc.identity_rows.IdentityRows`) behave as
the Python set of tuples they replaced: the same answer to which changes are new, to
membership and to size, through any order of feeds and discards, with room grown and shrunk
on the way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podd_cdc.identity_rows import IdentityRows

#: Numbers at int64's ends and in between, few enough that rows meet often.
_NUMBERS = st.sampled_from([-(2**63), -1, 0, 1, 2, 10**17, 10**18 - 1, 2**63 - 1])

_steps = st.lists(
    st.tuples(
        st.booleans(),  # add (else discard)
        st.lists(st.tuples(_NUMBERS, _NUMBERS, st.integers(0, 2)), max_size=40),
    ),
    max_size=30,
)


def _new_in(model: set[tuple[int, ...]], rows: Sequence[tuple[int, ...]]) -> list[bool]:
    """Which of `rows` a set of tuples finds new, adding them as it goes."""
    new = []
    for row in rows:
        new.append(row not in model)
        model.add(row)
    return new


def _columns(rows: Sequence[tuple[int, ...]], width: int) -> list[Any]:
    return [np.array([row[c] for row in rows], np.int64) for c in range(width)]


@settings(max_examples=300, deadline=None)
@given(_steps, st.sampled_from([2, 3]))
def test_identity_rows_answer_as_a_set_of_tuples(steps: Any, width: int) -> None:
    held, model = IdentityRows(width), set[tuple[int, ...]]()
    for adding, given_rows in steps:
        rows = [row[:width] for row in given_rows]
        if adding:
            expected = _new_in(model, rows)
            assert held.add_new(_columns(rows, width)).tolist() == expected
        else:
            held.discard(_columns(rows, width))
            model -= set(rows)
        assert len(held) == len(model)
        for row in rows:
            assert (row in held) == (row in model)


def test_identity_rows_grow_and_shrink_keeping_their_order() -> None:
    rng = np.random.default_rng(7)
    held, model = IdentityRows(2), set[tuple[int, ...]]()
    for _ in range(20):  # past the first room several times over, in random order
        high, low = rng.integers(0, 50, 700), rng.integers(-(2**63), 2**63 - 1, 700)
        fresh = held.add_new([high, low])
        rows = list(zip(high.tolist(), low.tolist(), strict=True))
        assert fresh.tolist() == _new_in(model, rows)
    assert len(held) == len(model) == 14_000
    gone = [*sorted(model)[::2], (99, 0)]  # and one never held
    held.discard(_columns(gone, 2))
    model -= set(gone)
    assert len(held) == len(model)
    assert all(row in held for row in model)
    assert not any(row in held for row in gone)
    again = [*sorted(model)[:5], (99, 0)]
    assert held.add_new(_columns(again, 2)).tolist() == [False] * 5 + [True]


def test_an_identity_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError, match="3 numbers, not 2"):
        IdentityRows(3).add_new([np.zeros(1, np.int64)] * 2)


def test_only_a_tuple_of_its_width_of_int64_numbers_is_ever_held() -> None:
    held = IdentityRows(2)
    held.add_new([np.array([1, 2**63 - 1]), np.array([2, 0])])
    assert (1, 2) in held
    assert (2**63 - 1, 0) in held
    for other in [("1", "2"), (1,), (1, 2, 0), [1, 2], (1.0, 2.0), (2**63 + 1, 0), None, "12"]:
        assert other not in held
