"""Cutting deltas from decoded records (docs/contracts/CDC.md "Common rules", "Transactions",
"Heartbeat and the delta cut"). Pure: no Kafka, and time only as the caller passes it.

Qlik: the bound is the smallest last-read `changeSequence` over the partitions that are not
quiet (read to their end, settled); a delta is the longest run of complete transactions below
it, in sequence order. DataWorks: the bound is the watermark, the smallest last heartbeat over
the partitions that carry heartbeats; a delta is every pending change at or below it. The
cutter holds what is fed and decides when a delta is due; `podd_cdc.choose` picks its changes.

`taken_by` is the one membership rule: feeding after a restart and rebuilding a recorded delta
use it, so a rebuilt delta is the delta first sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from podd_cdc.choose import EventTimes, qlik_choice
from podd_cdc.cutlog import Cut, Span, after_last, partition_key, split_key
from podd_cdc.held import Choice, Group, PartitionState, Pending, group_key, untaken
from podd_cdc.look_pacing import LookPacing
from podd_cdc.membership import Format, le, taken_by
from podd_cdc.records import Change, Heartbeat, Position, Record
from podd_cdc.rows import delta_rows, rows_digest
from podd_cdc.sequence_guard import SequenceGuard
from podd_cdc.values import millis_time
from protocol.apply_model import DeltaRow
from protocol.schema import LogicalSchema


@dataclass(frozen=True)
class Bounds:
    max_rows: int = 100_000  # a delta closes at this many changes (on a transaction boundary)
    max_age: float = 10.0  # ... or when its oldest change has waited this many seconds
    max_pending: int = 500_000  # changes held at most; an open transaction past it is bad input
    #: ... and the bytes of their source messages (500,000 changes of 1 MiB each were held).
    max_pending_bytes: int = 1 << 30
    #: A sequence, source time or eventTime further ahead of the clock is a stop (seconds).
    max_ahead: float = 86_400.0
    #: A Qlik sequence this much older than its partition's newest, never seen, is a stop.
    max_regress: float = 600.0


class Cutter:
    def __init__(
        self,
        fmt: Format,
        schema: LogicalSchema,
        starts: dict[str, int],
        last: Cut | None,
        bounds: Bounds = Bounds(),
    ) -> None:
        self.fmt = fmt
        self.schema = schema
        self.bounds = bounds
        self.last = last
        self.parts: dict[str, PartitionState] = {}
        for key, offset in starts.items():
            span = last.spans.get(key) if last is not None else None
            self.parts[key] = PartitionState(
                offset,
                span.end if span else offset,
                span.refresh_upto if span else offset,
            )
        self._identities: set[tuple[Any, ...]] = set()
        self.guard = SequenceGuard(
            fmt, timedelta(seconds=bounds.max_ahead), timedelta(seconds=bounds.max_regress)
        )
        self._groups: dict[Any, Group] = {}  # Qlik: the transactions held, by id
        self._event_times = EventTimes()  # DataWorks: the changes held, by eventTime
        self._fed = 0  # records fed so far
        self._refresh_held = 0  # full-load rows among the changes held
        self._pacing = LookPacing(bounds.max_rows, bounds.max_age)
        #: DataWorks partitions read to their end without a heartbeat: they hold nothing back.
        self.silent: set[str] = set()
        self.pending = 0
        self.pending_bytes = 0
        self.duplicates = 0
        self.late = 0

    def check(self, at: Position, record: Record, wall: datetime, key: str | None = None) -> None:
        """`SequenceStop` if `record`, read at `at`, breaks the source's order
        (`podd_cdc.sequence_guard`); call it before `feed`, which it leaves untouched. `key`:
        the partition's key (`partition_key`), where the caller has it."""
        part = self.parts[key or partition_key(at.topic, at.partition)]
        held = self._identities.__contains__
        self.guard.check(at, record, wall, last=self.last, newest=part.last_key, held=held)

    def remember_taken(self, identities: Iterable[Any]) -> None:
        """Changes of these identities were taken by a cut (a restarted run's last delta,
        read back): a copy read later is a duplicate (`SequenceGuard.remember_taken`)."""
        self.guard.remember_taken(identities)

    def add_partition(self, key: str, offset: int) -> None:
        """A partition that appeared while the run reads, read from `offset`."""
        if key not in self.parts:
            self.parts[key] = PartitionState(offset, offset, offset)

    def ahead(self, quiet: set[str]) -> tuple[set[str], Any]:
        """The partitions read further than one that holds the bound back (Qlik: the
        smallest last sequence, DataWorks: the smallest last heartbeat, among the partitions
        neither quiet nor silent; one with none yet holds it back most), and that key (None
        then). While a delta's worth is held and cannot be cut, reading these only adds to
        what is held: the bound moves when the others are read."""
        holding_nothing = quiet | self.silent
        last = [(k, p.last_key) for k, p in self.parts.items() if k not in holding_nothing]
        if any(key is None for _, key in last):
            return {k for k, key in last if key is not None}, None
        lowest = min((key for _, key in last), default=None)
        return {k for k, key in last if key != lowest}, lowest

    @property
    def holds_a_delta(self) -> bool:
        """Holding a delta's worth of changes (`max_rows`): one is due by size, and reading
        further ahead only adds to what is held (`podd_cdc.intake`)."""
        return self.pending >= self.bounds.max_rows

    @property
    def full(self) -> bool:
        """Holding as many changes, or as many of their bytes, as the bounds allow."""
        bounds = self.bounds
        return self.pending >= bounds.max_pending or self.pending_bytes >= bounds.max_pending_bytes

    def feed(
        self, at: Position, record: Record, now: float, size: int = 0, key: str | None = None
    ) -> None:
        """Hold `record`, read at `at` (in partition `key`, where the caller has it)."""
        self._fed += 1
        key = key or partition_key(at.topic, at.partition)
        part = self.parts[key]
        part.next_offset = at.offset + 1
        if not isinstance(record, Change):
            if isinstance(record, Heartbeat):
                part.last_key = max(part.last_key or 0, record.event_time_ms)
                self._event_times.note_watermark(self.parts, self.silent)
            return
        change = record
        qlik = self.fmt == "qlik"
        if (
            qlik
            and change.cut_key is not None
            and (part.last_key is None or change.cut_key > part.last_key)
        ):
            part.last_key = change.cut_key
        if self.last is not None and taken_by(self.fmt, self.last, at, change, key):
            self.duplicates += 1
            return
        if change.identity is not None:
            if change.identity in self._identities:
                self.duplicates += 1
                return
            self._identities.add(change.identity)
        if self.fmt == "dataworks" and self.last is not None and self.last.bound is not None:
            self.late += int(le(change.cut_key, self.last.bound))
        item = Pending(at, change, now, size)
        part.pending.append(item)
        if qlik and change.cut_key is not None:
            held_as = group_key(change)
            group = self._groups.get(held_as)
            if group is None:
                sequence = change.cut_key
                group = self._groups[held_as] = Group(
                    change.transaction is not None, sequence, sequence
                )
            group.add(item)
        elif self.fmt == "dataworks":
            self._event_times.add(change.cut_key, now)
        self.pending += 1
        self.pending_bytes += size
        self._refresh_held += change.cut_key is None

    def passed(self, at: Position) -> None:
        """A message that is no record (sent to the dead-letter topic): reading moved on."""
        self.parts[partition_key(at.topic, at.partition)].next_offset = at.offset + 1

    # --- the cut ----------------------------------------------------------------------
    def cut(
        self,
        delta: int,
        quiet: set[str],
        now: float,
        wall: datetime,
        *,
        force: bool = False,
        by_age: bool = True,
    ) -> tuple[Cut, dict[str, list[DeltaRow]]] | None:
        """Delta `delta` if one is due (size, age unless not `by_age`, every partition quiet,
        or `force`), else None."""
        all_quiet = quiet >= set(self.parts)
        settled = frozenset(quiet)

        def oldest() -> float:
            return min(
                (p.pending[0].arrived for p in self.parts.values() if p.pending), default=now
            )

        urgent = all_quiet or self.holds_a_delta
        pacing = self._pacing
        if not pacing.worth_looking(
            self._fed, settled, now, oldest, urgent=urgent, force=force, by_age=by_age
        ):
            return None  # `podd_cdc.look_pacing`: it would find no more than the last look
        if self.fmt == "dataworks":
            self.silent |= {k for k in quiet if self.parts[k].last_key is None}
            self._event_times.note_watermark(self.parts, self.silent)
        choice = self.look(quiet)
        found, first = choice.count, choice.oldest
        if not pacing.due(
            self._fed, settled, now, found, first, all_quiet=all_quiet, force=force, by_age=by_age
        ):
            return None
        return self._take(delta, choice.items(), choice.bound, wall)

    def look(self, quiet: set[str]) -> Choice:
        """What a delta cut now would take (`podd_cdc.choose`), counted and aged; its changes
        are listed only if asked for."""
        if self.fmt == "dataworks":
            return self._event_times.choice(self.parts, self.bounds.max_rows)
        return qlik_choice(
            self.parts,
            self._groups.values(),
            quiet,
            self.last.bound if self.last is not None else None,
            self.bounds.max_rows,
            refreshes_held=self._refresh_held > 0,
        )

    def _take(
        self, delta: int, chosen: list[Pending], bound: Any, wall: datetime
    ) -> tuple[Cut, dict[str, list[DeltaRow]]]:
        refreshed, taken_in = self._forget(chosen, bound)
        spans: dict[str, Span] = {}
        for key, part in self.parts.items():
            lo = part.pending[0].at.offset if part.pending else part.next_offset
            upto = max(refreshed.get(key, part.refresh_done - 1) + 1, part.refresh_done)
            part.pending = untaken(part.pending, taken_in.get(split_key(key), 0))
            next_lo = part.pending[0].at.offset if part.pending else part.next_offset
            spans[key] = Span(lo, part.prev_end, part.next_offset, part.refresh_done, upto, next_lo)
            part.prev_end, part.refresh_done = part.next_offset, upto
        changes = [(i.at, i.change) for i in chosen]
        rows = delta_rows(self.schema, changes)
        cut = Cut(
            delta,
            self._date(chosen, bound, wall),
            bound,
            self.last.bound if self.last else None,
            spans,
            len(chosen),
            sum(len(r) for r in rows.values()),
            rows_digest(rows),
        )
        self.last = cut
        return cut, rows

    def _forget(
        self, chosen: list[Pending], bound: Any
    ) -> tuple[dict[str, int], dict[tuple[str, int], int]]:
        """Mark `chosen` taken and drop it from what the cutter counts and indexes, in one
        pass (a delta holds up to `max_rows` changes); returns, per partition, the last
        offset of a full-load row among them, and how many changes were taken (by topic and
        partition). A DataWorks delta takes every change at or below `bound`, so its
        eventTimes there are dropped whole, not counted down change by change."""
        qlik = self.fmt == "qlik"
        identities, groups = self._identities, self._groups
        taken: list[Any] = []
        refreshed: dict[str, int] = {}
        taken_in: dict[tuple[str, int], int] = {}
        size = refreshes = 0
        for item in chosen:
            item.taken = True
            where = (item.at.topic, item.at.partition)
            taken_in[where] = taken_in.get(where, 0) + 1
            size += item.size
            change = item.change
            identity = change.identity
            if identity is not None:
                identities.discard(identity)
            cut_key = change.cut_key
            if cut_key is None:
                refreshes += 1
                key = partition_key(item.at.topic, item.at.partition)
                refreshed[key] = max(refreshed.get(key, -1), item.at.offset)
            elif qlik:
                taken.append(identity)
                groups.pop(group_key(change), None)
        if qlik:
            self.guard.remember_taken(taken)
        else:
            self._event_times.forget(bound)
        self.pending -= len(chosen)
        self.pending_bytes -= size
        self._refresh_held -= refreshes
        return refreshed, taken_in

    def _date(self, chosen: list[Pending], bound: Any, wall: datetime) -> datetime:
        if self.fmt == "dataworks":
            date = millis_time(bound).replace(tzinfo=UTC)
        else:
            times = [i.change.source_time for i in chosen if i.change.source_time is not None]
            date = max(times).replace(tzinfo=UTC) if times else wall
        return after_last(date, self.last)

    def oldest_open(self) -> Position | None:
        """Where the oldest change still held was read (for a bound's error message)."""
        items = [p.pending[0] for p in self.parts.values() if p.pending]
        return min((i.at for i in items), default=None)
