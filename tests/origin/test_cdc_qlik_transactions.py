"""Qlik's cut rule on arrays (`podd_cdc.qlik_transactions`) takes what the cutter's rule
(`podd_cdc.choose.qlik_choice` over `Group` objects, fed as `Cutter.feed` feeds them) takes:
the same transactions in the same order, the same count, age and bound."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from podd_cdc.choose import qlik_bound, qlik_choice
from podd_cdc.held import Group, PartitionState, Pending, group_key
from podd_cdc.qlik_headers import SEQUENCE_WIDTH
from podd_cdc.qlik_transactions import _by_group_then, choose, transactions_of
from podd_cdc.records import Change, Position

#: Sequences either side of the pair's split (17 digits, then 18), so both halves decide.
_SEQUENCES = sorted(a * 10**18 + b for a in range(5) for b in (0, 1, 5 * 10**17, 10**18 - 1))


def _text(value: int) -> str:
    return str(value).rjust(SEQUENCE_WIDTH, "0")


def _pair(text: str) -> tuple[int, int]:
    value = int(text)
    return value // 10**18, value % 10**18


_changes = st.lists(
    st.tuples(
        st.sampled_from(_SEQUENCES),
        st.sampled_from([None, "t1", "t2", "t3"]),
        st.one_of(st.none(), st.integers(-1, 4)),
        st.booleans(),
        st.integers(0, 9).map(float),
    ),
    max_size=24,
)
_FAULTS = (
    "none",
    "none",
    "none",
    "drop",
    "repeat",
    "two lasts",
    "no last",
    "zero",
    "beyond",
    "doubled",
)


@st.composite
def _transactions(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Transactions as Qlik writes them (counters 1..n, the last flagged), some with one
    fault, and changes outside any, interleaved in a drawn order."""
    made: list[tuple[Any, ...]] = []
    for t in range(draw(st.integers(0, 6))):
        transaction = draw(st.sampled_from([None, f"t{t}", f"t{t}", "t0"]))
        if transaction is None:
            made.append((None, None, False, float(draw(st.integers(0, 9)))))
            continue
        n = draw(st.integers(1, 4))
        counters, lasts = list(range(1, n + 1)), [False] * (n - 1) + [True]
        fault = draw(st.sampled_from(_FAULTS))
        if fault == "drop" and n > 1:
            del counters[0], lasts[0]
        elif fault == "repeat":
            counters.append(counters[-1])
            lasts.append(False)
        elif fault == "two lasts":
            lasts[0] = True
        elif fault == "no last":
            lasts[-1] = False
        elif fault == "zero":
            counters[0] = 0
        elif fault == "doubled" and n > 1:  # n counters up to n, n flagged, one twice
            counters[0] = counters[1]
        elif fault == "beyond" and n > 1:  # n counters, n flagged last, but 1 missing
            counters = list(range(2, n + 2))
            lasts = [c == n for c in counters]
        for counter, last in zip(counters, lasts, strict=True):
            made.append((transaction, counter, last, float(draw(st.integers(0, 9)))))
    order = draw(st.permutations(range(len(made))))
    sequences = draw(st.permutations(_SEQUENCES))
    # Up to 30 changes drawn, a sequence each of 20: those left over are never read.
    return [(sequences[k], *made[i]) for k, i in enumerate(order[: len(sequences)])]


_last_key = st.one_of(st.none(), st.sampled_from(_SEQUENCES).map(_text))


def _fed(drawn: list[tuple[Any, ...]]) -> tuple[dict[Any, Group], list[Change], list[float]]:
    """The changes as `Cutter.feed` holds them: a second copy of a sequence is dropped
    (Qlik's identity is the sequence), each kept change added to its transaction's group."""
    groups: dict[Any, Group] = {}
    seen: set[int] = set()
    changes, arrived = [], []
    for offset, (value, transaction, counter, last, at) in enumerate(drawn):
        if value in seen:
            continue
        seen.add(value)
        text = _text(value)
        change = Change((), text, (text,), (text,), None, transaction, counter, last)
        item = Pending(Position("q", 0, offset), change, at)
        held_as = group_key(change)
        if held_as not in groups:
            groups[held_as] = Group(transaction is not None, text, text)
        groups[held_as].add(item)
        changes.append(change)
        arrived.append(at)
    return groups, changes, arrived


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(_changes, _transactions()),
    st.lists(_last_key, min_size=1, max_size=3),
    st.sets(st.integers(0, 2)),
    st.one_of(st.none(), st.sampled_from(_SEQUENCES).map(_text)),
    st.integers(1, 8),
)
def test_the_arrays_take_what_the_groups_take(
    drawn: list[tuple[Any, ...]],
    last_keys: list[str | None],
    quiet_parts: set[int],
    previous: str | None,
    max_rows: int,
) -> None:
    groups, changes, arrived = _fed(drawn)
    parts = {f"q:{p}": PartitionState(0, 0, 0, key) for p, key in enumerate(last_keys)}
    quiet = {f"q:{p}" for p in quiet_parts}
    expected = qlik_choice(parts, groups.values(), quiet, previous, max_rows, refreshes_held=False)

    numbered = {key: n for n, key in enumerate(groups)}
    pairs = [_pair(c.cut_key) for c in changes]
    held = transactions_of(
        np.array([numbered[group_key(c)] for c in changes], np.int64),
        (np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)),
        np.array([c.counter or 0 for c in changes], np.int64),
        np.array([c.last_in_transaction for c in changes], np.bool_),
        np.array([c.transaction is not None for c in changes], np.bool_),
        np.array(arrived, np.float64),
    )
    assert held.complete.tolist() == [g.complete() for g in groups.values()]
    bound, everything = qlik_bound(parts, quiet)
    taken = choose(
        held,
        None if bound is None else _pair(bound),
        everything,
        None if previous is None else _pair(previous),
        max_rows,
    )

    in_order = list(groups.values())
    items = [item for t in taken.transactions.tolist() for item in in_order[t].items]
    assert [id(i) for i in items] == [id(i) for i in expected.items()]
    assert taken.count == expected.count
    assert taken.oldest == expected.oldest or (math.isinf(taken.oldest) and not expected.count)
    assert (None if taken.bound is None else _text(taken.bound[0] * 10**18 + taken.bound[1])) == (
        expected.bound
    )


def test_an_open_transaction_holds_back_the_ones_after_it() -> None:
    """Named cases: a transaction missing its counter 2 is not complete, and nothing with a
    larger sequence is taken past it; one after a later one that ends below the bound is."""
    groups, changes, arrived = _fed(
        [
            (_SEQUENCES[0], "t1", 1, False, 0.0),
            (_SEQUENCES[1], "t1", 2, True, 0.0),
            (_SEQUENCES[2], "t2", 1, False, 1.0),  # t2 has no counter 2
            (_SEQUENCES[3], "t2", 3, True, 1.0),
            (_SEQUENCES[4], None, None, False, 2.0),
        ]
    )
    held = transactions_of(
        np.array([0, 0, 1, 1, 2]),
        (
            np.array([_pair(c.cut_key)[0] for c in changes]),
            np.array([_pair(c.cut_key)[1] for c in changes]),
        ),
        np.array([1, 2, 1, 3, 0]),
        np.array([False, True, False, True, False]),
        np.array([True, True, True, True, False]),
        np.array(arrived),
    )
    assert held.complete.tolist() == [True, False, True]
    taken = choose(held, _pair(_text(_SEQUENCES[-1])), False, None, 100)
    assert taken.transactions.tolist() == [0]
    assert (taken.count, taken.oldest) == (2, 0.0)
    assert taken.bound == _pair(changes[1].cut_key)
    assert len(groups) == 3


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 40),
            st.one_of(st.integers(-3, 6), st.sampled_from([-(2**63), 2**63 - 1, 2**40])),
        ),
        max_size=60,
    )
)
def test_changes_ordered_by_group_then_counter_as_lexsort_orders_them(
    changes: list[tuple[int, int]],
) -> None:
    """One sort of a combined key where both fit an int64 together, else `lexsort`: the same
    (group, counter) pairs in the same order either way, at int64's ends too."""
    group = np.array([g for g, _ in changes], np.int64)
    counter = np.array([c for _, c in changes], np.int64)
    order, expected = _by_group_then(group, counter), np.lexsort((counter, group))
    assert group[order].tolist() == group[expected].tolist()
    assert counter[order].tolist() == counter[expected].tolist()
