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
  (`SequenceGuard`), as the cutter checks it; its change is held with the others fed since
  the last look at what is held, a block of each table's (`_settle`).
A cut (`cut`) is paced by `podd_cdc.look_pacing` and returns the `ColumnarDelta`, whose
`cut` the caller records in the cut log before sending its chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from podd_cdc.array_cutter import ArrayCutter, partition_runs
from podd_cdc.cutlog import Cut, partition_key
from podd_cdc.cutter import Bounds
from podd_cdc.dataworks_feed import exact_lines, too_long
from podd_cdc.dataworks_held import DataWorksHeld, EventLook
from podd_cdc.qlik_cut import ColumnarDelta, delta_of
from podd_cdc.qlik_held import HeldChanges
from podd_cdc.records import Change, Heartbeat, Position, Record
from podd_cdc.sequence_guard import SequenceGuard
from podd_cdc.tables import MappedTable
from protocol.schema import LogicalSchema


class DataWorksArrayCutter(ArrayCutter):
    held: DataWorksHeld

    def __init__(
        self,
        schema: LogicalSchema,
        table_of: Callable[[str], MappedTable],
        starts: dict[str, int],
        last: Cut | None,
        bounds: Bounds,
    ) -> None:
        """`table_of`: a mapped table by the name its changes' rows give (the decoder's)."""
        super().__init__(schema, table_of, starts, last, bounds)
        self.held = DataWorksHeld([starts[key] for key in self.keys], last, self._spans_of(last))
        self.guard = SequenceGuard(
            "dataworks", timedelta(seconds=bounds.max_ahead), timedelta(seconds=bounds.max_regress)
        )

    # --- what the intake and the runner ask ----------------------------------------------
    @property
    def silent(self) -> set[str]:
        """Partitions read to their end without a heartbeat: they hold nothing back."""
        return {self.keys[p] for p in self.held.silent}

    @property
    def late(self) -> int:
        self._settle()
        return self.held.late

    def ahead(self, quiet: set[str]) -> tuple[set[str], Any]:
        """`Cutter.ahead`: the partitions whose last heartbeat is above the one that holds
        the watermark back, and that heartbeat (None while one has read none)."""
        ahead, lowest = self.held.ahead({self._partition[key] for key in quiet})
        return {self.keys[p] for p in ahead}, lowest

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
        self._buffer(part, at.offset, record, now, size)

    def _settle(self) -> None:
        """Hold the exact decoder's changes fed since the last look, in the order fed."""
        lines = self._exact_lines(exact_lines)
        if lines is not None:
            self.kept.drop_fresh(self._feed_runs(lines))

    def feed_lines(self, lines: HeldChanges) -> None:
        """Hold a read batch's lines (of any partitions; each partition's in offset order,
        every one sure and in order by the intake's checks)."""
        self._settle()
        self._fed += len(lines)
        self.kept.drop_fresh(self._feed_runs(lines))

    def _feed_runs(self, lines: HeldChanges) -> HeldChanges:
        """Hold `lines` a run of one partition at a time, in their order; those held."""
        kept = [run[self.held.feed(run)] for run in partition_runs(lines)]
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

        def look() -> EventLook:
            self.held.hear_none({self._partition[key] for key in quiet})
            return self.held.look(self.bounds.max_rows)

        found = self._due(quiet, now, look, force=force, by_age=by_age)
        if found is None:
            return None
        taken = self.held.take(found, self.last)
        made = delta_of(
            delta,
            self.schema,
            taken.changes,
            (found.watermark, taken.date),
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
