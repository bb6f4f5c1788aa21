"""Qlik's cut rule on arrays (step 2 of the columnar origin, docs/cdc/internals.md): the
transactions held, a line of numbers each, and which of them a delta takes, exactly as
`podd_cdc.choose.qlik_choice` decides for `podd_cdc.held.Group` objects. Pure numpy: no
Python object per change or per transaction.

A sequence is the pair `podd_cdc.qlik_batch_changes` reads from a `changeSequence` (its
first 17 digits, its last 18), which sorts as the text does. Within one call the pairs are
ranked once, so that every comparison after that is of one integer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

Sequence = tuple[int, int]


@dataclass(frozen=True)
class Transactions:
    """The transactions held (a change outside a transaction is one of its own), a line
    each, numbered in the order each was first fed: what a `Group` keeps, on arrays."""

    lo: tuple[Any, Any]  # its smallest sequence, as (first 17 digits, last 18)
    hi: tuple[Any, Any]  # its largest
    count: Any  # its changes
    complete: Any  # no transaction, or its last event and every counter from 1 to it once
    first: Any  # when its first change arrived


def transactions_of(
    group: Any,
    sequence: tuple[Any, Any],
    counter: Any,
    last: Any,
    in_transaction: Any,
    arrived: Any,
) -> Transactions:
    """Changes, a line each, into the transactions they are of: `group` numbers each
    change's transaction 0..g-1 (every number used); `counter` is 0 where a change has
    none, as `Group` counts it; `in_transaction`, whether its transaction has an id."""
    groups = int(group.max()) + 1 if len(group) else 0
    lo, hi = (
        _extreme(group, sequence, groups, np.minimum),
        _extreme(group, sequence, groups, np.maximum),
    )
    count = np.bincount(group, minlength=groups)
    first = np.full(groups, np.inf)
    np.minimum.at(first, group, arrived)
    transaction = np.zeros(groups, np.bool_)
    transaction[group] = in_transaction
    return Transactions(lo, hi, count, ~transaction | _counted(group, counter, last, groups), first)


def _extreme(group: Any, sequence: tuple[Any, Any], groups: int, pick: Any) -> tuple[Any, Any]:
    """Each group's smallest sequence (`pick` `np.minimum`) or largest (`np.maximum`), as a
    pair: its first half picked, then the second among the changes of that first half. Two
    passes over the changes, where sorting them all by group and sequence took a
    three-key `lexsort` (70-87 ms against 5-6 for 130,000 held, at every look)."""
    high, low = sequence
    start = np.iinfo(np.int64).max if pick is np.minimum else np.iinfo(np.int64).min
    first_half = np.full(groups, start, np.int64)
    pick.at(first_half, group, high)
    at = high == first_half[group]
    second_half = np.full(groups, start, np.int64)
    pick.at(second_half, group[at], low[at])
    return first_half, second_half


def _runs(grouped: Any, groups: int) -> tuple[Any, Any]:
    """Where each group's run begins and ends (inclusive) in `grouped`, sorted by group."""
    starts = np.searchsorted(grouped, np.arange(groups))
    return starts, np.append(starts[1:], len(grouped))[:groups] - 1


def _by_group_then(group: Any, counter: Any) -> Any:
    """An order of the changes by group, then counter; equal pairs in any order. One sort of
    a combined key where group and counter fit one int64 together (a fifth of `lexsort`'s
    two stable passes), else `lexsort`."""
    if not len(group):
        return np.zeros(0, np.int64)
    low, high = int(counter.min()), int(counter.max())
    span = high - low + 1
    if span <= 0 or int(group.max()) >= (2**62) // span:
        return np.lexsort((counter, group))
    return np.argsort(group * span + (counter - low))


def _counted(group: Any, counter: Any, last: Any, groups: int) -> Any:
    """Per transaction: exactly one change flagged last, whose counter is the number of
    changes, and the counters exactly 1..n (`Group.complete`)."""
    by_counter = _by_group_then(group, counter)
    grouped, counted = group[by_counter], counter[by_counter]
    new = np.ones(len(grouped), np.bool_)
    new[1:] = (grouped[1:] != grouped[:-1]) | (counted[1:] != counted[:-1])
    distinct = np.bincount(grouped[new], minlength=groups)
    starts, ends = _runs(grouped, groups)
    lowest, highest = counted[starts], counted[ends]
    lasts = np.bincount(group[last], minlength=groups)
    last_counter = np.zeros(groups, np.int64)
    last_counter[group[last]] = counter[last]
    n = np.bincount(group, minlength=groups)
    return (lasts == 1) & (n == last_counter) & (n == distinct) & (lowest >= 1) & (highest == n)


@dataclass(frozen=True)
class Taken:
    """What a delta takes: its transactions, in the order the delta holds them, their
    changes, when the first of them arrived, and the bound it is cut at (None: no
    transaction taken, and none before)."""

    transactions: Any
    count: int
    oldest: float
    bound: Sequence | None


def choose(
    held: Transactions,
    bound: Sequence | None,
    everything: bool,
    previous_bound: Sequence | None,
    max_rows: int,
) -> Taken:
    """`qlik_choice`'s rule: the transactions by their smallest sequence (then as first
    fed), taken while each is complete and wholly at or below `bound` (any, if
    `everything`: no partition holds the bound), until `max_rows` changes are taken; then
    the longest such run after which no transaction left behind has a smaller sequence
    than one taken. `bound` None, not `everything`: some partition has no sequence yet."""
    lo_rank, hi_rank, bound_rank = _ranks(held, bound)
    order = np.lexsort((np.arange(len(lo_rank)), lo_rank))
    lo, hi = lo_rank[order], hi_rank[order]
    below = np.ones(len(order), np.bool_) if everything else hi <= bound_rank
    if bound is None and not everything:
        below[:] = False
    counts = held.count[order]
    before = np.cumsum(counts) - counts  # changes taken ahead of each
    stops = ~(below & held.complete[order])
    stops[1:] |= before[1:] >= max_rows
    length = int(np.argmax(stops)) if stops.any() else len(order)
    length = _without_overtaken(lo, hi, length)
    taken = order[:length]
    if not length:
        return Taken(taken, 0, math.inf, previous_bound)
    top = taken[int(np.argmax(hi_rank[taken]))]
    return Taken(
        taken,
        int(held.count[taken].sum()),
        float(held.first[taken].min()),
        (int(held.hi[0][top]), int(held.hi[1][top])),
    )


def _without_overtaken(lo: Any, hi: Any, length: int) -> int:
    """The longest run of the first `length` transactions (in order of `lo`) after which
    none left behind starts below one taken ends: the first that is left starts at
    `lo[k]`, since `lo` ascends."""
    if length == len(lo) or length == 0:
        return length
    reach = np.maximum.accumulate(hi[:length])
    fits = reach < lo[1 : length + 1]  # a run of k + 1 leaves lo[k + 1] first behind
    kept = np.nonzero(fits)[0]
    return int(kept[-1]) + 1 if len(kept) else 0


def _ranks(held: Transactions, bound: Sequence | None) -> tuple[Any, Any, int]:
    """Each transaction's lo and hi, and the bound, as ranks among them all (equal
    sequences, equal ranks)."""
    count = len(held.count)
    bound_pair = bound if bound is not None else (0, 0)
    ranks = pair_ranks(
        np.concatenate([held.lo[0], held.hi[0], [bound_pair[0]]]),
        np.concatenate([held.lo[1], held.hi[1], [bound_pair[1]]]),
    )
    return ranks[:count], ranks[count : 2 * count], int(ranks[-1])


def pair_ranks(high: Any, low: Any) -> Any:
    """Each sequence (`high[k]`, `low[k]`) as its rank among them all: equal sequences,
    equal ranks; a smaller sequence, a smaller rank."""
    high, low = np.asarray(high, np.int64), np.asarray(low, np.int64)
    order = np.lexsort((low, high))
    step = np.zeros(len(order), np.int64)
    step[1:] = (high[order][1:] != high[order][:-1]) | (low[order][1:] != low[order][:-1])
    ranks = np.empty(len(order), np.int64)
    ranks[order] = np.cumsum(step)
    return ranks
