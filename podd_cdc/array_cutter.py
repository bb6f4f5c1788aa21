"""What the two cutters on arrays share (`QlikArrayCutter`, `DataWorksArrayCutter`): the
partitions' keys and numbers, the blocks of columns kept for the changes held, the pacing of
the looks (`podd_cdc.look_pacing`), and what the intake and the runner ask of what is held,
as they ask a `Cutter`. Each format's cutter holds its own `held` (`QlikHeld`,
`DataWorksHeld`), which keeps these counts and places."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import Any, Protocol, TypeVar

import numpy as np

from podd_cdc.cutlog import Cut, partition_key
from podd_cdc.cutter import Bounds
from podd_cdc.held_blocks import HeldBlocks
from podd_cdc.look_pacing import LookPacing
from podd_cdc.qlik_delta_rows import Block
from podd_cdc.qlik_exact_block import ExactBlock
from podd_cdc.qlik_feed import ReadAt
from podd_cdc.qlik_held import HeldChanges
from podd_cdc.records import Change, Position
from podd_cdc.tables import MappedTable
from protocol.schema import LogicalSchema


class Held(Protocol):
    """What a format's held changes keep that the cutter hands on."""

    pending: int
    pending_bytes: int
    duplicates: int

    def add_partition(self, offset: int) -> int: ...

    def read_to(self, partition: int, offset: int) -> None: ...

    def first_held(self) -> dict[int, int]: ...

    def oldest_arrival(self) -> float | None: ...


class Found(Protocol):
    """What a look found: how many changes, and when the first of them arrived."""

    @property
    def count(self) -> int: ...

    @property
    def oldest(self) -> float: ...


F = TypeVar("F", bound=Found)
#: A block's held lines of its changes (`qlik_feed.exact_lines`, `dataworks_feed.exact_lines`).
LinesOf = Callable[[list[Change], ReadAt, int], HeldChanges]


def partition_runs(lines: HeldChanges) -> Iterator[HeldChanges]:
    """`lines` a run of one partition at a time, in their order (what a held feed takes)."""
    change = np.flatnonzero(lines.partition[1:] != lines.partition[:-1]) + 1
    for start, end in pairwise([0, *change.tolist(), len(lines)]):
        yield lines[start:end]


class ArrayCutter:
    held: Held

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
        self.kept = HeldBlocks()
        self._pacing = LookPacing(bounds.max_rows, bounds.max_age)
        self._fed = 0  # records fed so far
        #: The exact decoder's changes fed since the last look at what is held, each with
        #: where and when it was read and its table as it was read (a later description may
        #: map the name anew), to be held together (`_settle`): held one at a time, a change
        #: cost 90 (DataWorks) to 150 µs (Qlik) against 11-14 a change at a time.
        self._exact: list[tuple[Change, MappedTable, int, int, float, int]] = []

    def _settle(self) -> None:
        """Bring what is held up to date before it is asked about: hold the exact decoder's
        changes fed since the last look (`_exact_lines`)."""

    def _buffer(self, partition: int, offset: int, change: Change, now: float, size: int) -> None:
        """Keep an exact decoder's change, read at `offset` of `partition`, to be held at the
        next look (`_settle`)."""
        table = self.table_of(change.rows[0].table)
        self._exact.append((change, table, partition, offset, now, size))

    def _exact_lines(self, lines_of: LinesOf) -> HeldChanges | None:
        """The exact decoder's changes fed since the last look as held lines, in the order
        fed (None: none), a block of each table's kept for them; `lines_of` makes a block's
        lines of its changes, where and when they were read, and its number."""
        fed, self._exact = self._exact, []
        if not fed:
            return None
        tables: dict[int, list[int]] = {}  # by the table's id: its changes' places
        for k, entry in enumerate(fed):
            tables.setdefault(id(entry[1]), []).append(k)
        parts = []
        for these in tables.values():
            changes = [fed[k][0] for k in these]
            block = self.kept.keep(ExactBlock(fed[these[0]][1], changes))
            partition, offset, arrived, size = (
                np.array(c) for c in zip(*(fed[k][2:] for k in these), strict=True)
            )
            read = ReadAt(partition, offset, arrived, size)
            parts.append((np.array(these, np.int64), lines_of(changes, read, block)))
        order = np.argsort(np.concatenate([at for at, _ in parts]), kind="stable")
        return HeldChanges.joined([lines for _, lines in parts])[order]

    def _spans_of(self, last: Cut | None) -> list[Any]:
        """The last cut's span of each partition (None where it recorded none)."""
        return [last.spans.get(key) if last is not None else None for key in self.keys]

    # --- what the intake and the runner ask ----------------------------------------------
    @property
    def parts(self) -> dict[str, int]:
        """Each partition's key and its number among the held arrays."""
        return self._partition

    @property
    def pending(self) -> int:
        self._settle()
        return self.held.pending

    @property
    def pending_bytes(self) -> int:
        self._settle()
        return self.held.pending_bytes

    @property
    def duplicates(self) -> int:
        self._settle()
        return self.held.duplicates

    @property
    def holds_a_delta(self) -> bool:
        return self.pending >= self.bounds.max_rows

    @property
    def blocks(self) -> dict[int, Block]:
        self._settle()
        return self.kept.blocks

    @property
    def pinned_bytes(self) -> int:
        self._settle()
        return self.kept.pinned_bytes

    @property
    def full(self) -> bool:
        """Holding as many changes as the bounds allow, or as many bytes: of their source
        messages, or of the batches kept for them, whichever is more."""
        bounds = self.bounds
        kept = max(self.pending_bytes, self.pinned_bytes)
        return self.pending >= bounds.max_pending or kept >= bounds.max_pending_bytes

    def add_partition(self, key: str, offset: int) -> None:
        if key not in self._partition:
            self._partition[key] = self.held.add_partition(offset)
            self.keys.append(key)

    def oldest_open(self) -> Position | None:
        """Where the oldest change still held was read (for a bound's error message)."""
        self._settle()
        first = [self._position(p, at) for p, at in self.held.first_held().items()]
        return min(first, default=None)

    def _position(self, partition: int, offset: int) -> Position:
        topic, _, number = self.keys[partition].rpartition(":")
        return Position(topic, int(number), offset)

    def passed(self, at: Position) -> None:
        """A message that is no record (sent to the dead-letter topic): reading moved on."""
        self._settle()  # past the changes fed before it
        self.held.read_to(self._partition[partition_key(at.topic, at.partition)], at.offset + 1)

    def new_block(self, block: Block) -> int:
        """Keep `block` (a batch's columns of one table) while changes in it are held; its
        number, for the lines that point into it."""
        self._settle()  # the blocks kept since a feed are the next feed's
        return self.kept.keep(block)

    # --- the cut --------------------------------------------------------------------------
    def _due(
        self, quiet: set[str], now: float, look: Callable[[], F], *, force: bool, by_age: bool
    ) -> F | None:
        """What `look` finds, where a delta is due (`Cutter.cut`'s pacing: size, age unless
        not `by_age`, every partition quiet, or `force`), else None; `look` is asked only
        where a look may find more than the last one."""
        self._settle()
        all_quiet = quiet >= set(self.keys)
        settled = frozenset(quiet)

        def oldest() -> float:
            """When each partition's first change held, as fed, arrived: the earliest."""
            found = self.held.oldest_arrival()
            return now if found is None else found

        pacing = self._pacing
        urgent = all_quiet or self.holds_a_delta
        if not pacing.worth_looking(
            self._fed, settled, now, oldest, urgent=urgent, force=force, by_age=by_age
        ):
            return None
        found = look()
        if not pacing.due(
            self._fed,
            settled,
            now,
            found.count,
            found.oldest,
            all_quiet=all_quiet,
            force=force,
            by_age=by_age,
        ):
            return None
        return found
