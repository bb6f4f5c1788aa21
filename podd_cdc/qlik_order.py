"""The source's order on arrays (step 2 of the columnar origin): where, in a batch of one
partition's Qlik changes, the exact order check (`podd_cdc.sequence_guard`) must begin to
judge a change at a time.

Every change before that place passes the exact check, so it is fed as a batch; from there
on, the caller checks and feeds one change at a time by the exact rules, which name the
stop, if it is one. The place is found without the exact check's memory of what was held
and taken, so it comes early rather than late: at the first change that is
- ahead of the clock (its sequence's time, or its source time);
- at or below the last cut's bound (a copy, or a stop: the exact check tells);
- below a sequence read before it in its partition (a reordering, or a stop).
A full-load (REFRESH) row has no sequence and is never checked.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import numpy as np

from podd_cdc.qlik_transactions import Sequence, pair_ranks
from podd_cdc.sequence_guard import Limits


def order_limits(wall: datetime, max_ahead: timedelta) -> tuple[int, int]:
    """The exact check's limits at `wall` (`sequence_guard.Limits`), as numbers: the largest
    time prefix a sequence may carry (`YYYYMMDDHHmmSShh`, its first 16 digits) and the
    latest source time, in µs since 1970."""
    limits = Limits.at(wall, max_ahead)
    return int(limits.latest_prefix), limits.latest_us


def first_to_judge(
    sequence: tuple[Any, Any],
    refresh: Any,
    source_us: Any,
    timed: Any,
    newest: Sequence | None,
    bound: Sequence | None,
    limits: tuple[int, int],
) -> int:
    """Where in the batch (`sequence` as pairs, in offset order; `source_us` valid where
    `timed`) the exact check must begin. `newest`: the largest sequence read in the
    partition before the batch; `bound`: the last cut's; `limits`: `order_limits` at
    the batch's wall clock."""
    high, low = sequence
    count = len(high)
    if not count:
        return 0
    prefix, source_limit = limits
    judge = ~refresh & ((high // 10 > prefix) | (timed & (source_us > source_limit)))
    rank, newest_rank, bound_rank = _ranks(high, low, newest, bound)
    if bound is not None:
        judge |= ~refresh & (rank <= bound_rank)
    reach = np.where(refresh, -1, rank)
    before = np.maximum.accumulate(np.concatenate([[newest_rank], reach]))[:-1]
    judge |= ~refresh & (rank < before)
    return int(np.argmax(judge)) if judge.any() else count


def _ranks(high: Any, low: Any, newest: Sequence | None, bound: Sequence | None) -> Any:
    """The batch's sequences, `newest` and `bound`, as ranks among them all (-1 for a
    missing `newest`, which nothing is below)."""
    extra = [s if s is not None else (0, 0) for s in (newest, bound)]
    ranks = pair_ranks(
        np.concatenate([high, [e[0] for e in extra]]), np.concatenate([low, [e[1] for e in extra]])
    )
    count = len(high)
    return ranks[:count], (int(ranks[count]) if newest is not None else -1), int(ranks[-1])
