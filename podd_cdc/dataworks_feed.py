"""The lines `DataWorksHeld.feed` takes (`HeldChanges`), from either kind of DataWorks change:
lines of a read batch (`dataworks_batch_changes.DataWorksChanges`) or changes the exact decoder
made (`qlik_exact_block.ExactBlock` keeps their rows). One place for what a held line says of
a DataWorks change, so the two kinds are held alike: its order is the exact decoder's
(`sequenceId`, and its half: 0 for `UPDATE_BEFOR`, 1 else), its eventTime is its source time
(in µs), its operation's code is half its identity; no transaction, no full-load row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from podd_cdc import dataworks_batch_kernel as kernel
from podd_cdc.dataworks_batch_changes import DataWorksChanges
from podd_cdc.errors import BadInput
from podd_cdc.qlik_feed import ReadAt, held_lines
from podd_cdc.qlik_held import HeldChanges
from podd_cdc.records import Change

_CODES = {name: code for code, name in enumerate(kernel.OPERATIONS)}
_SPLIT = 10**18
#: The largest `sequenceId` held on arrays: its order is two int64s, the id's last 18
#: digits and its half sharing the second. The exact decoder takes ids of up to 40 digits;
#: a larger one than this is bad input on arrays (`--no-columnar` holds it).
MAX_SEQUENCE = 9 * _SPLIT * _SPLIT - 1


def too_long(change: Change) -> None:
    """BadInput if `change`'s `sequenceId` is larger than the arrays hold (`MAX_SEQUENCE`)."""
    if change.order[0] > MAX_SEQUENCE:
        raise BadInput(
            None,
            f"sequenceId {change.order[0]} has more digits than the columnar origin holds "
            f"(up to {MAX_SEQUENCE:,}); podd-cdc run --no-columnar holds it",
        )


def order_of(sequence: Any, half: Any) -> tuple[Any, Any]:
    """The exact decoder's order (`sequenceId`, half) as the pair a held line sorts by."""
    return sequence // _SPLIT, (sequence % _SPLIT) * 2 + half


def batch_lines(made: DataWorksChanges, lines: Any, read: ReadAt, block: int) -> HeldChanges:
    """Lines `lines` of a batch's changes `made` (of one table), each read as `read` says."""
    return _lines(
        read,
        order_of(made.sequence[lines], made.half[lines]),
        made.event_ms[lines],
        made.operation[lines],
        block,
        np.asarray(lines, np.int64),
    )


def exact_lines(changes: Sequence[Change], read: ReadAt, block: int) -> HeldChanges:
    """The exact decoder's `changes` (of one block: line k is change k), each read as
    `read` says."""
    for change in changes:
        too_long(change)
    high, low = zip(*(order_of(c.order[0], c.order[1]) for c in changes), strict=True)
    return _lines(
        read,
        (np.array(high, np.int64), np.array(low, np.int64)),
        np.array([c.cut_key for c in changes], np.int64),
        np.array([_CODES[c.identity[1]] if c.identity else -1 for c in changes], np.int64),
        block,
        np.arange(len(changes), dtype=np.int64),
    )


def _lines(
    read: ReadAt,
    order: tuple[Any, Any],
    event_ms: Any,
    operation: Any,
    block: int,
    lines: Any,
) -> HeldChanges:
    count = len(lines)
    return held_lines(
        read,
        order,
        np.full(count, -1, np.int64),
        np.zeros(count, np.int64),
        np.ones(count, np.bool_),
        np.zeros(count, np.bool_),
        event_ms * 1000,
        block,
        lines,
        operation,
    )
