"""The lines `QlikHeld.feed` takes (`HeldChanges`), from either kind of change: lines of a
read batch (`qlik_batch_changes.TableChanges`) or changes the exact decoder made
(`qlik_exact_block.ExactBlock`). One place for what a held line says of a change, so the
two kinds are held alike: a full-load (REFRESH) row has no sequence, no transaction and
no source time, as the exact decoder's `Change` has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from podd_cdc import qlik_batch_kernel as kernel
from podd_cdc.qlik_batch import QlikBatch
from podd_cdc.qlik_batch_changes import REFRESH, TableChanges
from podd_cdc.qlik_held import NO_TIME, HeldChanges, sequence_of_key
from podd_cdc.records import Change
from podd_cdc.transaction_codes import TransactionCodes
from podd_cdc.values import micros


@dataclass(frozen=True)
class ReadAt:
    """Where and when each line's message was read: its partition, its offset, when it
    arrived, and its bytes (what holding it costs, roughly); each an array of a value a
    line, or one value for every line."""

    partition: Any
    offset: Any
    arrived: Any
    size: Any


def batch_lines(
    batch: QlikBatch,
    made: TableChanges,
    lines: Any,
    read: ReadAt,
    block: int,
    coded: Any,
) -> HeldChanges:
    """Lines `lines` of a batch's changes `made` (of one table), each read as `read` says;
    its transaction's code is its message's in `coded` (`message_codes`, made once for
    every table of the batch), none for a full-load row."""
    refresh = made.operation[lines] == REFRESH
    return held_lines(
        read,
        (made.sequence[0][lines], made.sequence[1][lines]),
        np.where(refresh, -1, coded[made.messages[lines]]),
        made.counter[lines],
        made.last_in_transaction[lines],
        refresh,
        np.where(made.timed[lines] & ~refresh, made.source_us[lines], NO_TIME),
        block,
        np.asarray(lines, np.int64),
    )


def message_codes(batch: QlikBatch, messages: Any, codes: TransactionCodes) -> Any:
    """The transaction code of each of a batch's messages (-1: none, or not of `messages`),
    its id looked up in `codes` once for every table (a full-load row's id too: its line
    takes none, and a code no held line carries is forgotten, `QlikArrayCutter._tidy`)."""
    starts, ends = (a[messages] for a in batch.texts(kernel.M_TX))
    coded = np.full(len(batch.heads), -1, np.int64)
    coded[messages] = codes.codes(batch.out, starts, ends, starts >= 0)
    return coded


def exact_lines(
    changes: Sequence[Change], read: ReadAt, block: int, codes: TransactionCodes
) -> HeldChanges:
    """The exact decoder's `changes` (of one block: line k is change k), each read as
    `read` says; transaction ids get their codes from `codes`."""
    pairs = [sequence_of_key(c.cut_key) for c in changes]
    ids = [(c.transaction or "").encode() for c in changes]
    sizes = np.array([len(i) for i in ids], np.int64)
    ends = np.cumsum(sizes)
    out = np.frombuffer(b"".join(ids), np.uint8)
    given = np.array([c.transaction is not None for c in changes], np.bool_)
    return held_lines(
        read,
        (np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)),
        codes.codes(out, ends - sizes, ends, given),
        np.array([c.counter or 0 for c in changes], np.int64),
        np.array([c.last_in_transaction for c in changes], np.bool_),
        np.array([c.cut_key is None for c in changes], np.bool_),
        np.array([_micros(c.source_time) for c in changes], np.int64),
        block,
        np.arange(len(changes), dtype=np.int64),
    )


def held_lines(
    read: ReadAt,
    sequence: tuple[Any, Any],
    transaction: Any,
    counter: Any,
    last: Any,
    refresh: Any,
    source_us: Any,
    block: int,
    lines: Any,
    operation: Any = 0,
) -> HeldChanges:
    """The held lines of changes of one block (lines `lines` there), read as `read` says;
    each value an array of a value a line, `operation` also one value for every line."""

    def each(value: Any, kind: Any) -> Any:
        return np.broadcast_to(np.asarray(value, kind), (len(lines),)).copy()

    return HeldChanges(
        each(read.partition, np.int64),
        each(read.offset, np.int64),
        sequence,
        transaction,
        counter,
        last,
        each(read.arrived, np.float64),
        each(read.size, np.int64),
        refresh,
        source_us,
        np.full(len(lines), block, np.int64),
        lines,
        each(operation, np.int64),
    )


def _micros(when: datetime | None) -> int:
    return NO_TIME if when is None else micros(when)
