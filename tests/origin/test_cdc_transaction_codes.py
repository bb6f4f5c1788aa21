"""Transaction ids as codes (`podd_cdc.transaction_codes`): equal ids, equal codes, across
batches; different ids, different codes, even where their hashes are made to collide; and
the ids remembered are only those not forgotten."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podd_cdc import column_kernels
from podd_cdc.transaction_codes import TransactionCodes

_ids = st.lists(st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "ba", "ü"])))


def _batch(ids: list[str | None]) -> tuple[Any, Any, Any, Any]:
    """A buffer holding the ids one after another (with a byte between), and each one's
    start, end and presence."""
    out, starts, ends = bytearray(), [], []
    for text in ids:
        data = (text or "").encode()
        starts.append(len(out))
        out += data
        ends.append(len(out))
        out += b"|"
    present = np.array([t is not None for t in ids], np.bool_)
    return np.frombuffer(bytes(out), np.uint8), np.array(starts), np.array(ends), present


def _check(codes: TransactionCodes, batches: list[list[str | None]]) -> None:
    seen: dict[str, int] = {}
    for ids in batches:
        found = codes.codes(*_batch(ids)).tolist()
        for text, code in zip(ids, found, strict=True):
            if text is None:
                assert code == -1
                continue
            assert seen.setdefault(text, code) == code  # the same id, the same code
        assert len(set(seen.values())) == len(seen)  # different ids, different codes
    assert len(codes) == len(seen)


@settings(deadline=None)  # (the first call loads the compiled hash)
@given(st.lists(_ids, max_size=4))
def test_equal_ids_share_a_code_and_different_ones_do_not(batches: list[Any]) -> None:
    _check(TransactionCodes(), batches)


def test_ids_whose_hashes_collide_keep_their_own_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    zero = lambda text, starts, ends: np.zeros(len(starts), np.int64)  # noqa: E731
    monkeypatch.setattr(column_kernels, "text_hashes", zero)
    _check(TransactionCodes(), [["a", "b", "a", None, "ab"], ["b", "ba", "a"]])


def test_forgotten_ids_are_not_remembered_and_come_back_with_new_codes() -> None:
    codes = TransactionCodes()
    first = codes.codes(*_batch(["a", "b", "a"]))
    codes.forget(first[:1])
    assert len(codes) == 1
    again = codes.codes(*_batch(["a", "b"]))
    assert again[1] == first[1]
    assert again[0] not in first.tolist()
