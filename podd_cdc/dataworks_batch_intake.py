"""A fetch of DataWorks JSON messages held from arrays (the columnar intake for DataWorks,
issue 46): the runs of a fetch (one a partition), read as one batch
(`dataworks_batch.read_batch`), are held by the DataWorks cutter on arrays, each up to the
first message the batch is not sure of: a message the kernel does not read (a table's DDL,
an escape it leaves to Python, bad input), whose schema
the decoder has not learnt, larger than a value may be, whose change or heartbeat the batch
is not sure of (`dataworks_batch_changes`), or whose eventTime is further ahead of the clock
than the order check allows (the exact check names it). That message and the rest of its
run are read as today, one at a time by the exact decoder, which names bad input, learns a
new schema and stops on schema changes; the rest of the fetch is then read as a batch again
(`intake.BATCH_ROUNDS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from podd_cdc import dataworks_batch_kernel as kernel
from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.dataworks_array_cutter import DataWorksArrayCutter
from podd_cdc.dataworks_batch import (
    DataWorksBatch,
    SchemaGroups,
    read_values,
    schema_groups,
    tables_of,
)
from podd_cdc.dataworks_batch_changes import (
    DataWorksChanges,
    heartbeats,
    markers,
    tables_changes,
)
from podd_cdc.dataworks_feed import batch_lines
from podd_cdc.qlik_batch_intake import MIN_BATCH, fetch_arrays, then_exactly
from podd_cdc.qlik_delta_rows import TableBlock
from podd_cdc.qlik_feed import ReadAt
from podd_cdc.qlik_held import HeldChanges
from podd_cdc.sequence_guard import Limits
from podd_cdc.tables import MappedTable
from podd_cdc.values import MAX_VALUE_BYTES
from podd_kafka.record_runs import RecordRun

#: Schemas a fetch may learn ahead of the exact decoder (`_learn_ahead`): each costs the
#: batch's changes made again, and a hostile topic may send a new schema every message.
LEARN_AHEAD = 16


@dataclass(frozen=True)
class _Read:
    """A fetch's batch as the intake reads it: which messages it may be sure of at all, the
    tables, each table's changes, the heartbeats, and which messages it is sure of."""

    unread: Any
    groups: list[tuple[MappedTable, Any]]
    made: list[DataWorksChanges]
    beats: Any
    beat_ms: Any
    markers: Any
    sure: Any


#: Each table's changes made of a batch so far, by the table's id: (the table, its messages,
#: its changes). A table's changes depend only on its messages, so learning another table
#: leaves them as they were.
_Made = dict[int, tuple[MappedTable, Any, DataWorksChanges]]


def _read(
    batch: DataWorksBatch,
    decoder: DataWorksDecoder,
    sizes: Any,
    latest_ms: int,
    grouped: SchemaGroups,
    made_before: _Made,
) -> _Read:
    """The batch read with the tables the decoder knows now: the changes of a table whose
    messages are those of an earlier read are not made again (`made_before`, which this
    read adds to)."""
    unread = ~(batch.read & (sizes <= MAX_VALUE_BYTES))
    tables, placed = tables_of(batch, decoder.known_table, grouped)
    placed[unread] = -1
    groups = [(table, np.nonzero(placed == k)[0]) for k, table in enumerate(tables)]
    missing = [(table, ms) for table, ms in groups if not _made(made_before, table, ms)]
    if missing:
        for (table, ms), changes in zip(missing, tables_changes(batch, missing), strict=True):
            made_before[id(table)] = (table, ms, changes)
    made = [made_before[id(table)][2] for table, _ in groups]
    beats, beat_ms = heartbeats(batch, placed)
    beats, beat_ms = beats[~unread[beats]], beat_ms[~unread[beats]]
    sure = np.zeros(len(sizes), np.bool_)
    for changes in made:
        sure[changes.messages[changes.sure]] = True
    marks = markers(batch, placed)
    marks = marks[~unread[marks]]
    sure[beats] = True
    sure[marks] = True
    sure &= batch.heads[:, kernel.M_EVENT] <= latest_ms  # else the exact check judges it
    return _Read(unread, groups, made, beats, beat_ms, marks, sure)


def _made(made_before: _Made, table: MappedTable, messages: Any) -> bool:
    """Whether `table`'s changes of exactly `messages` were made by an earlier read."""
    found = made_before.get(id(table))
    return found is not None and found[0] is table and np.array_equal(found[1], messages)


def _learn_ahead(
    batch: DataWorksBatch,
    decoder: DataWorksDecoder,
    sizes: Any,
    latest_ms: int,
    runs: list[tuple[str, RecordRun]],
) -> _Read:
    """The batch read, after learning the schemas the exact decoder would learn next: in the
    runs' order, while every run before is held whole, a run's first message the batch is
    not sure of only because its schema is new (a row message the kernel read) has its
    table learnt now, by the decoder's own rules, as decoding it would (a fetch of ten new
    tables would otherwise end its rounds of batches, `intake.BATCH_ROUNDS`, at the fourth,
    and be read a message at a time). No message before it in the record path's order is
    read by the exact decoder, so what that learns, and what it refuses, is the same."""
    grouped, made = schema_groups(batch), _Made()
    read = _read(batch, decoder, sizes, latest_ms, grouped, made)
    heads = batch.heads
    for _ in range(LEARN_AHEAD):
        stop = _first_not_sure(read.sure, runs)
        if stop is None:
            break
        head = heads[stop]
        new = (
            not read.unread[stop]
            and head[kernel.M_OP] in _ROW_OPERATIONS
            and head[kernel.M_SCHEMA] >= 0
            and decoder.known_table(_schema(batch, stop)) is None
        )
        if not new or decoder.learn_table(_schema(batch, stop)) is None:
            break
        read = _read(batch, decoder, sizes, latest_ms, grouped, made)
    return read


_ROW_OPERATIONS = (kernel.INSERT, kernel.UPDATE_AFTER, kernel.UPDATE_BEFOR, kernel.DELETE)


def _schema(batch: DataWorksBatch, m: int) -> bytes:
    start, end = batch.heads[m, kernel.M_SCHEMA], batch.heads[m, kernel.M_SCHEMA_END]
    return bytes(batch.buf[start:end])


def _first_not_sure(sure: Any, runs: list[tuple[str, RecordRun]]) -> int | None:
    """The first message the batch is not sure of in the record path's order (the runs one
    after another), or None."""
    unsure = np.nonzero(~sure[: sum(len(messages) for _, messages in runs)])[0]
    return int(unsure[0]) if len(unsure) else None


def hold_fetch(
    decoder: DataWorksDecoder,
    cutter: DataWorksArrayCutter,
    runs: list[tuple[str, RecordRun]],
    arrived: float,
    wall: datetime,
) -> dict[str, tuple[int, int]]:
    """Hold the first messages of each partition's run in a fetch (`runs`: key and messages,
    in offset order) from arrays, as far as the batch is sure of them. Per partition: how
    many were held, and how many after them are for the exact decoder before a batch may be
    sure again (`qlik_batch_intake.then_exactly`). Nothing is held from a fetch of fewer
    than `MIN_BATCH` messages (an empty answer)."""
    count = sum(len(messages) for _, messages in runs)
    if count < MIN_BATCH:
        return {}
    values, offsets, partition, sizes = fetch_arrays(runs, cutter.parts)
    batch = read_values(values)
    latest_ms = Limits.at(wall, timedelta(seconds=cutter.bounds.max_ahead)).latest_us // 1000
    read = _learn_ahead(batch, decoder, sizes, latest_ms, runs)
    # The runs up to the first message not sure of, in the record path's order: the runs
    # after it are left to the next batch (`intake.BATCH_ROUNDS`), so that the exact decoder
    # reads what it reads before them, as it would (which copy of a change is held, and
    # which schema is learnt first, follow the order of reading).
    first, where, held, start = {}, {}, np.zeros(count, np.bool_), 0
    stopped_at: str | None = None  # the run of the first message not sure of
    for key, messages in runs:
        ours = read.sure[start : start + len(messages)]
        whole = len(messages) if ours.all() else int(np.argmin(ours))
        first[key] = 0 if stopped_at is not None else whole
        if stopped_at is None and whole < len(messages):
            stopped_at = key
        held[start : start + first[key]] = True
        where[key] = start
        start += len(messages)
    parts = []
    for (table, _), changes in zip(read.groups, read.made, strict=True):
        these = np.nonzero(held[changes.messages])[0]
        if len(these):
            block = cutter.new_block(TableBlock(table, batch.out, changes))
            at = changes.messages[these]
            lines = batch_lines(
                changes, these, ReadAt(partition[at], offsets[at], arrived, sizes[at]), block
            )
            parts.append((at, lines))
    if parts:  # in the fetch's order: each run's, in offset order
        order = np.argsort(np.concatenate([at for at, _ in parts]), kind="stable")
        cutter.feed_lines(HeldChanges.joined([lines for _, lines in parts])[order])
    kept = held[read.beats]
    for m, ms in zip(read.beats[kept].tolist(), read.beat_ms[kept].tolist(), strict=True):
        cutter.beat(int(partition[m]), int(ms), int(offsets[m]))
    for m in read.markers[held[read.markers]].tolist():
        cutter.skip(int(partition[m]), int(offsets[m]))
    found = then_exactly(runs, first, where, read.unread)
    if stopped_at is not None:
        keys = [key for key, _ in runs]
        for key in keys[keys.index(stopped_at) + 1 :]:
            found[key] = (0, 0)  # read in the next batch, after the exact decoder's
    return found
