"""The Qlik cutter on arrays: what `podd_cdc.cutter.Cutter` does for a Qlik run (hold, check
the source's order, pace the looks, cut), with the changes held on arrays (`QlikHeld`) and
each delta cut by `qlik_cut.cut_delta`: the cutter of `podd-cdc run --columnar`, fed by the
columnar intake (`podd_cdc.qlik_batch_intake`).

It is asked what the intake and the runner ask a `Cutter`, by the same partition keys
(`cutlog.partition_key`). Changes come two ways:
- a read batch's lines (`feed_lines`), each pointing into a block of columns the caller made
  (`qlik_feed.batch_lines`), checked on arrays here (`qlik_order.first_to_judge`) up to the
  first change the exact check must judge;
- one change of the exact decoder (`check`, then `feed`), checked by the exact rules
  (`SequenceGuard`), as the cutter checks it, and held in a block of its own.
A cut (`cut`) is paced by `podd_cdc.look_pacing` and returns the `ColumnarDelta`, whose
`cut` the caller records in the cut log before sending its chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from podd_cdc.array_cutter import ArrayCutter, partition_runs
from podd_cdc.cutlog import Cut, partition_key
from podd_cdc.cutter import Bounds
from podd_cdc.identity_rows import IdentityRows
from podd_cdc.qlik_cut import ColumnarDelta, cut_delta
from podd_cdc.qlik_feed import ReadAt, exact_lines
from podd_cdc.qlik_held import (
    NO_TIME,
    HeldChanges,
    QlikHeld,
    identity_of,
    sequence_key_of,
    sequence_of_key,
)
from podd_cdc.qlik_order import first_to_judge, order_limits
from podd_cdc.qlik_transactions import Sequence
from podd_cdc.records import Change, Position, Record
from podd_cdc.sequence_guard import SequenceGuard
from podd_cdc.tables import MappedTable
from podd_cdc.transaction_codes import TransactionCodes
from protocol.schema import LogicalSchema


class QlikArrayCutter(ArrayCutter):
    held: QlikHeld

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
        bound = sequence_of_key(last.bound) if last is not None and last.bound else None
        self.held = QlikHeld([starts[key] for key in self.keys], bound, self._spans_of(last))
        self.guard = SequenceGuard(
            "qlik", timedelta(seconds=bounds.max_ahead), timedelta(seconds=bounds.max_regress)
        )
        self.codes = TransactionCodes()
        self.silent: set[str] = set()  # DataWorks' partitions without heartbeats: none here
        #: The newest sequence and the identities among the exact decoder's changes not held
        #: yet (`ArrayCutter._buffer`), which the order check asks of.
        self._exact_newest: dict[int, Sequence] = {}
        self._exact_identities: set[int] = set()

    # --- what the intake and the runner ask ----------------------------------------------
    def ahead(self, quiet: set[str]) -> tuple[set[str], Any]:
        """`Cutter.ahead`: the partitions read further than the one that holds the bound
        back, and that bound as a sequence key (None while one has read none)."""
        self._settle()
        ahead, lowest = self.held.ahead({self._partition[key] for key in quiet})
        return {self.keys[p] for p in ahead}, None if lowest is None else sequence_key_of(lowest)

    # --- feeding --------------------------------------------------------------------------
    def check(self, at: Position, record: Record, wall: datetime, key: str | None = None) -> None:
        """`Cutter.check`: `SequenceStop` if the exact decoder's `record` breaks the source's
        order; call it before `feed`."""
        part = self._partition[key or partition_key(at.topic, at.partition)]
        newest = _later(self.held.newest[part], self._exact_newest.get(part))
        self.guard.check(
            at,
            record,
            wall,
            last=self.last,
            newest=None if newest is None else sequence_key_of(newest),
            held=self._holds,
        )

    def remember_taken(self, identities: Iterable[Any]) -> None:
        """`Cutter.remember_taken`: the exact decoder's identities of changes a cut took
        (a restarted run's last delta, read back), kept as sequence pairs (see `_holds`)."""
        pairs = [sequence_of_key(identity[0]) for identity in identities if identity]
        self._remember_cut(tuple(np.array([p[k] for p in pairs], np.int64) for k in (0, 1)))

    def _remember_cut(self, sequence: tuple[Any, ...]) -> None:
        """The sequences (two arrays: the pairs' halves) a cut took, for the guard."""
        taken = IdentityRows(2)
        taken.add_new(sequence)
        self.guard.remember_cut(taken)

    def _holds(self, identity: Any) -> bool:
        """Whether a change of the exact decoder's `identity` (its sequence key) is held,
        or was taken by a recent cut (the cuts' memory holds the sequences' pairs)."""
        key = identity[0]
        sequence = sequence_of_key(key)
        buffered = identity_of(sequence) in self._exact_identities
        return buffered or self.held.holds(sequence) or self.guard.taken(sequence)

    def feed(
        self, at: Position, record: Record, now: float, size: int = 0, key: str | None = None
    ) -> None:
        """Hold one record of the exact decoder: a change with the others fed since the last
        look at what is held (`_settle`); any other record only moves reading on."""
        part = self._partition[key or partition_key(at.topic, at.partition)]
        if not isinstance(record, Change) or not record.rows:
            self._settle()  # reading moves on past the changes fed before it
            self._fed += 1
            self.held.read_to(part, at.offset + 1)
            return
        self._buffer(part, at.offset, record, now, size)
        if record.cut_key is not None:
            sequence = sequence_of_key(record.cut_key)
            before = self._exact_newest.get(part)
            self._exact_newest[part] = sequence if before is None else max(before, sequence)
            bound = self.held.last_bound
            if bound is None or sequence > bound:  # held by `QlikHeld.feed`, but a copy
                self._exact_identities.add(identity_of(sequence))

    def _settle(self) -> None:
        """Hold the exact decoder's changes fed since the last look, in the order fed, their
        transaction ids coded by this cutter's codes."""
        issued = self.codes.issued
        lines = self._exact_lines(self._coded_lines)
        self._exact_newest, self._exact_identities = {}, set()
        if lines is not None:
            kept = [run[self._hold(run)] for run in partition_runs(lines)]
            self._tidy(issued, HeldChanges.joined(kept))

    def _coded_lines(self, changes: list[Change], read: ReadAt, block: int) -> HeldChanges:
        """A block's held lines of the exact decoder's `changes`, coded by this cutter."""
        return exact_lines(changes, read, block, self.codes)

    def feed_lines(
        self, make: Callable[[TransactionCodes], HeldChanges], wall: datetime
    ) -> HeldChanges:
        """Hold the lines `make` makes of a read batch (of any partitions), their
        transaction ids coded by this cutter's codes. Each partition's lines, in offset
        order, are checked on arrays first (`qlik_order.first_to_judge`, at the clock
        `wall`): from the first one the exact check must judge on, none is held. Those are
        returned, for the caller to read again by the exact decoder, after the held ones."""
        self._settle()
        issued = self.codes.issued
        lines = make(self.codes)
        limits = order_limits(wall, timedelta(seconds=self.bounds.max_ahead))
        kept, rest = [], []
        for part in np.unique(lines.partition).tolist():
            mine = np.nonzero(lines.partition == part)[0]
            these = lines[mine[np.argsort(lines.offset[mine], kind="stable")]]
            judge = first_to_judge(
                these.sequence,
                these.refresh,
                these.source_us,
                these.source_us != NO_TIME,
                self.held.newest[part],
                self.held.last_bound,
                limits,
            )
            fed = these[:judge]
            kept.append(fed[self._hold(fed)])
            rest.append(these[judge:])
        self._tidy(issued, HeldChanges.joined(kept) if kept else lines[:0])
        return HeldChanges.joined(rest) if rest else lines

    def _hold(self, lines: HeldChanges) -> Any:
        """Hold `lines` (of one partition, in offset order); which were held."""
        self._fed += len(lines)
        return self.held.feed(lines)

    def _tidy(self, issued: int, kept: HeldChanges) -> None:
        """After a feed that held `kept`: the codes issued since `issued` that no change
        held carries (a second copy's id, a line not fed, a full-load row's id) are
        forgotten, or copies with ever new ids would grow the codes without bound; and the
        blocks kept since the last feed that no change held points into are dropped."""
        fresh = np.arange(issued, self.codes.issued, dtype=np.int64)
        unused = np.setdiff1d(fresh, kept.transaction)
        if len(unused):
            self.codes.forget(unused)
        self.kept.drop_fresh(kept)

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
        parts = {self._partition[key] for key in quiet}
        look = self._due(
            quiet,
            now,
            lambda: self.held.look(parts, self.bounds.max_rows),
            force=force,
            by_age=by_age,
        )
        if look is None:
            return None
        made = cut_delta(
            delta, self.schema, self.held, look, self.blocks, self.keys, self.last, wall
        )
        self.last = made.cut
        taken = made.taken[~made.taken.refresh]
        self._remember_cut(taken.sequence)
        self.codes.forget(made.taken.transaction)
        self.kept.keep_only(self.held.held())
        return made


def _later(a: Sequence | None, b: Sequence | None) -> Sequence | None:
    """The later of two sequences, either of which may be none."""
    if a is None:
        return b
    return a if b is None or a >= b else b
