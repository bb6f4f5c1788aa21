"""The DataWorks cutter on arrays: what `podd_cdc.cutter.Cutter` does for a DataWorks run
(hold, check the source's order, note the watermarks, pace the looks, cut), with the changes
held on arrays (`DataWorksHeld`) and each delta cut by `qlik_cut.delta_of`: the cutter of
`podd-cdc run --columnar` for DataWorks, fed by the columnar intake
(`podd_cdc.dataworks_batch_intake`).

It is asked what the intake and the runner ask a `Cutter`, by the same partition keys
(`cutlog.partition_key`). Changes come two ways:
- a read batch's lines (`feed_lines`), each pointing into a block of columns the caller made
  (`dataworks_feed.batch_lines`), and its heartbeats (`beat`); the intake has left every
  message whose eventTime the order check must judge (ahead of the clock) to the exact path;
- one record of the exact decoder (`check`, then `feed`), checked by the exact rules
  (`SequenceGuard`), as the cutter checks it; a change is held in a block of its own.
A cut (`cut`) is paced by `podd_cdc.look_pacing` and returns the `ColumnarDelta`, whose
`cut` the caller records in the cut log before sending its chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

import numpy as np

from podd_cdc.cutlog import Cut, partition_key
from podd_cdc.cutter import Bounds
from podd_cdc.dataworks_feed import exact_lines, too_long
from podd_cdc.dataworks_held import DataWorksHeld
from podd_cdc.held_blocks import HeldBlocks
from podd_cdc.look_pacing import LookPacing
from podd_cdc.qlik_cut import ColumnarDelta, delta_of
from podd_cdc.qlik_delta_rows import Block
from podd_cdc.qlik_exact_block import ExactBlock
from podd_cdc.qlik_feed import ReadAt
from podd_cdc.qlik_held import HeldChanges
from podd_cdc.records import Change, Heartbeat, Position, Record
from podd_cdc.sequence_guard import SequenceGuard
from podd_cdc.tables import MappedTable
from protocol.schema import LogicalSchema


class DataWorksArrayCutter:
    def __init__(
        self,
        schema: LogicalSchema,
        table_of: Callable[[str], MappedTable],
        starts: dict[str, int],
        last: Cut | None,
        bounds: Bounds,
    ) -> None:
        """`table_of`: a mapped table by the name its changes' rows give (the decoder's)."""
        self.schema = schema
        self.table_of = table_of
        self.bounds = bounds
        self.last = last
        self.keys = list(starts)
        self._partition = {key: p for p, key in enumerate(self.keys)}
        spans = [last.spans.get(key) if last is not None else None for key in self.keys]
        self.held = DataWorksHeld([starts[key] for key in self.keys], last, spans)
        self.guard = SequenceGuard(
            "dataworks", timedelta(seconds=bounds.max_ahead), timedelta(seconds=bounds.max_regress)
        )
        self.kept = HeldBlocks()
        self._pacing = LookPacing(bounds.max_rows, bounds.max_age)
        self._fed = 0  # records fed so far
        #: The exact decoder's changes fed since the last look at what is held, to be held
        #: together (`_hold_exact`): held one at a time, each cost about 90 µs.
        self._exact: list[tuple[int, int, Change, float, int]] = []

    # --- what the intake and the runner ask ----------------------------------------------
    @property
    def parts(self) -> dict[str, int]:
        """Each partition's key and its number among the held arrays."""
        return self._partition

    @property
    def silent(self) -> set[str]:
        """Partitions read to their end without a heartbeat: they hold nothing back."""
        return {self.keys[p] for p in self.held.silent}

    @property
    def pending(self) -> int:
        self._hold_exact()
        return self.held.pending

    @property
    def pending_bytes(self) -> int:
        self._hold_exact()
        return self.held.pending_bytes

    @property
    def duplicates(self) -> int:
        self._hold_exact()
        return self.held.duplicates

    @property
    def late(self) -> int:
        self._hold_exact()
        return self.held.late

    @property
    def holds_a_delta(self) -> bool:
        return self.pending >= self.bounds.max_rows

    @property
    def blocks(self) -> dict[int, Block]:
        self._hold_exact()
        return self.kept.blocks

    @property
    def full(self) -> bool:
        """Holding as many changes as the bounds allow, or as many bytes: of their source
        messages, or of the batches kept for them, whichever is more."""
        bounds = self.bounds
        kept = max(self.pending_bytes, self.kept.pinned_bytes)  # (`pending_bytes` holds all)
        return self.pending >= bounds.max_pending or kept >= bounds.max_pending_bytes

    def add_partition(self, key: str, offset: int) -> None:
        if key not in self._partition:
            self._partition[key] = self.held.add_partition(offset)
            self.keys.append(key)

    def ahead(self, quiet: set[str]) -> tuple[set[str], Any]:
        """`Cutter.ahead`: the partitions whose last heartbeat is above the one that holds
        the watermark back, and that heartbeat (None while one has read none)."""
        ahead, lowest = self.held.ahead({self._partition[key] for key in quiet})
        return {self.keys[p] for p in ahead}, lowest

    def oldest_open(self) -> Position | None:
        """Where the oldest change still held was read (for a bound's error message)."""
        self._hold_exact()
        first = [self._position(p, at) for p, at in self.held.first_held().items()]
        return min(first, default=None)

    def _position(self, partition: int, offset: int) -> Position:
        topic, _, number = self.keys[partition].rpartition(":")
        return Position(topic, int(number), offset)

    # --- feeding --------------------------------------------------------------------------
    def check(self, at: Position, record: Record, wall: datetime, key: str | None = None) -> None:
        """`Cutter.check`: `SequenceStop` if the exact decoder's `record` is ahead of the
        clock, BadInput if its `sequenceId` is longer than the arrays hold; call it before
        `feed`."""
        self.guard.check(at, record, wall, last=self.last, newest=None, held=_never)
        if isinstance(record, Change):
            too_long(record)

    def remember_taken(self, identities: Iterable[Any]) -> None:
        """`Cutter.remember_taken`: a DataWorks copy of a change cut before cannot be told
        from a late change (CDC.md, "Readings" 9), so nothing is remembered."""
        del identities

    def feed(
        self, at: Position, record: Record, now: float, size: int = 0, key: str | None = None
    ) -> None:
        """Hold one record of the exact decoder: a change in a block of its own, a heartbeat
        as its partition's mark; any other record only moves reading on."""
        part = self._partition[key or partition_key(at.topic, at.partition)]
        self._fed += 1
        if isinstance(record, Heartbeat):
            self.held.beat(part, record.event_time_ms, at.offset)
            return
        if not isinstance(record, Change) or not record.rows:
            self.held.read_to(part, at.offset + 1)
            return
        self._exact.append((part, at.offset, record, now, size))

    def _hold_exact(self) -> None:
        """Hold the exact decoder's changes fed since the last look, in the order fed: a
        block of each table's, and their lines fed a partition's run at a time."""
        fed, self._exact = self._exact, []
        if not fed:
            return
        tables: dict[str, list[int]] = {}
        for k, (_, _, change, _, _) in enumerate(fed):
            tables.setdefault(change.rows[0].table, []).append(k)
        parts = []
        for name, these in tables.items():
            block = self.kept.keep(ExactBlock(self.table_of(name), [fed[k][2] for k in these]))
            partition, offset, _, arrived, size = (
                np.array(c) for c in zip(*(fed[k] for k in these), strict=True)
            )
            lines = exact_lines(
                [fed[k][2] for k in these], ReadAt(partition, offset, arrived, size), block
            )
            parts.append((np.array(these, np.int64), lines))
        order = np.argsort(np.concatenate([at for at, _ in parts]), kind="stable")
        self.kept.drop_fresh(
            self._feed_runs(HeldChanges.joined([lines for _, lines in parts])[order])
        )

    def passed(self, at: Position) -> None:
        """A message that is no record (sent to the dead-letter topic): reading moved on."""
        self.held.read_to(self._partition[partition_key(at.topic, at.partition)], at.offset + 1)

    def new_block(self, block: Block) -> int:
        """Keep `block` (a batch's columns of one table) while changes in it are held; its
        number, for the lines that point into it (the exact decoder's changes fed before
        are held first: the blocks kept since a feed are the next feed's)."""
        self._hold_exact()
        return self.kept.keep(block)

    def feed_lines(self, lines: HeldChanges) -> None:
        """Hold a read batch's lines (of any partitions; each partition's in offset order,
        every one sure and in order by the intake's checks)."""
        self._hold_exact()
        self._fed += len(lines)
        self.kept.drop_fresh(self._feed_runs(lines))

    def _feed_runs(self, lines: HeldChanges) -> HeldChanges:
        """Hold `lines` a run of one partition at a time, in their order; those held."""
        change = np.flatnonzero(lines.partition[1:] != lines.partition[:-1]) + 1
        bounds = [0, *change.tolist(), len(lines)]
        kept = []
        for start, end in pairwise(bounds):
            these = lines[start:end]
            kept.append(these[self.held.feed(these)])
        return HeldChanges.joined(kept) if kept else lines

    def beat(self, partition: int, event_ms: int, offset: int) -> None:
        """A heartbeat a read batch is sure of, fed in its partition's offset order."""
        self._fed += 1
        self.held.beat(partition, event_ms, offset)

    def skip(self, partition: int, offset: int) -> None:
        """A marker a read batch is sure of (no row change): reading moved on."""
        self._fed += 1
        self.held.read_to(partition, offset + 1)

    # --- the cut --------------------------------------------------------------------------
    def cut(
        self,
        delta: int,
        quiet: set[str],
        now: float,
        wall: datetime,
        *,
        force: bool = False,
        by_age: bool = True,
    ) -> ColumnarDelta | None:
        """`Cutter.cut`: delta `delta` if one is due, else None."""
        del wall  # a DataWorks delta is dated by its watermark
        self._hold_exact()
        all_quiet = quiet >= set(self.keys)
        settled = frozenset(quiet)

        def oldest() -> float:
            found = self.held.oldest_arrival()
            return now if found is None else found

        pacing = self._pacing
        urgent = all_quiet or self.holds_a_delta
        if not pacing.worth_looking(
            self._fed, settled, now, oldest, urgent=urgent, force=force, by_age=by_age
        ):
            return None
        self.held.hear_none({self._partition[key] for key in quiet})
        look = self.held.look(self.bounds.max_rows)
        if not pacing.due(
            self._fed,
            settled,
            now,
            look.count,
            look.oldest,
            all_quiet=all_quiet,
            force=force,
            by_age=by_age,
        ):
            return None
        taken = self.held.take(look, self.last)
        made = delta_of(
            delta,
            self.schema,
            taken.changes,
            (look.watermark, taken.date),
            taken.spans,
            self.blocks,
            self.keys,
            self.last,
        )
        self.last = made.cut
        self.kept.keep_only(self.held.held())
        return made


def _never(identity: Any) -> bool:
    """DataWorks' order check asks nothing of what is held."""
    del identity
    return False
