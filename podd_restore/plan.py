"""What a backup topic holds for one datamart, and what a restore can apply (BACKUP.md).

Pure: the scan (`podd_restore.scan`) feeds it every message's key and place; it groups the
messages into increments (`incrementId`, `deltaNum`), de-duplicates chunks, knows which
increments are complete, picks one per delta, and says where a restore must stop.

An increment is complete when every stream 1..streamTotal has its last chunk and every
chunk below it, data and changelog messages counted together. A chunk seen twice (a writer
retry) counts once: its first copy is kept. Of several complete increments of one delta (runs
that wrote it again) the one whose messages end latest in the topic is used when they hold the
same content (`content_digest` of each message, sync markers aside); increments that differ
are refused, naming each, unless a run is named (`--increment-id`): whoever can write the
topic could otherwise append one that replaced the delta. Delta 0 written by two runs is
refused unless a run is named (two snapshots in one topic, BACKUP.md).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from protocol.backup import BackupKey, BackupMessageType
from protocol.gaps import Gap, stream_gaps


@dataclass(frozen=True)
class Place:
    """Where a message is in the topic."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"topic {self.topic} partition {self.partition} offset {self.offset}"


@dataclass(frozen=True)
class BackupChunk:
    """One message of an increment: its key and place (and, once staged, its body file)."""

    key: BackupKey
    place: Place
    size: int
    path: str | None = None
    #: What the staged body decompresses to (None: not staged, or not readable).
    decoded: int | None = None
    #: Its content without the sync marker (`protocol.ocf.content_digest`).
    digest: bytes = b""


#: The most writer streams an increment may declare (Prostore's `--threadsCount`); more is
#: refused, so a hostile `streamTotal` never drives a loop.
MAX_STREAMS = 4096
#: Other datamarts counted by name at most; the rest are counted together.
MAX_OTHER_DATAMARTS = 100
OTHERS = "(other names)"


@dataclass
class Increment:
    increment_id: str
    delta_num: int
    delta_date: datetime
    stream_total: int
    chunks: dict[tuple[int, int], BackupChunk] = field(default_factory=dict)
    last: dict[int, int] = field(default_factory=dict)  # stream -> its last chunk number
    duplicates: int = 0
    problems: list[str] = field(default_factory=list)
    end: tuple[int, int] = (0, 0)  # (offset, partition) of its latest message

    def add(self, chunk: BackupChunk) -> None:
        key = chunk.key
        if not 1 <= key.stream_total <= MAX_STREAMS:
            self.problems.append(
                f"{chunk.place}: streamTotal {key.stream_total} is not within 1..{MAX_STREAMS}"
            )
            return
        if key.delta_date != self.delta_date or key.stream_total != self.stream_total:
            self.problems.append(
                f"{chunk.place}: deltaDate/streamTotal differ from the increment's first message"
            )
            return
        if not 1 <= key.stream_number <= key.stream_total or key.chunk_number < 1:
            self.problems.append(
                f"{chunk.place}: stream {key.stream_number} chunk {key.chunk_number} is out "
                f"of range (streamTotal {key.stream_total})"
            )
            return
        where = (key.stream_number, key.chunk_number)
        if where in self.chunks:
            self.duplicates += 1
            return
        if key.is_last_chunk:
            known = self.last.get(key.stream_number)
            if known is not None and known != key.chunk_number:
                self.problems.append(f"{chunk.place}: stream {key.stream_number} ends twice")
                return
            self.last[key.stream_number] = key.chunk_number
        self.chunks[where] = chunk
        self.end = max(self.end, (chunk.place.offset, chunk.place.partition))

    def gaps(self) -> list[Gap]:
        if not 1 <= self.stream_total <= MAX_STREAMS:
            return [Gap(1)]  # unusable: its problems say why
        numbers: dict[int, list[int]] = {}
        for stream, number in self.chunks:
            numbers.setdefault(stream, []).append(number)
        found: list[Gap] = []
        for stream in range(1, self.stream_total + 1):
            found += stream_gaps(stream, numbers.get(stream, []), self.last.get(stream))
        return found

    @property
    def complete(self) -> bool:
        if self.problems:
            return False
        beyond = any(c > self.last.get(s, c) for s, c in self.chunks)
        return not beyond and not self.gaps()

    def content(self) -> tuple[object, ...]:
        """What it holds, to tell a writer's re-run of the same delta (the same content)
        from a different increment of it."""
        return (
            self.delta_date,
            tuple(
                (where, c.key.message_type, c.key.table_name, c.digest)
                for where, c in sorted(self.chunks.items())
            ),
        )

    def messages(self, kind: BackupMessageType) -> list[BackupChunk]:
        """Its messages of one kind, in (stream, chunk) order."""
        return [
            self.chunks[where]
            for where in sorted(self.chunks)
            if self.chunks[where].key.message_type is kind
        ]

    def tables(self) -> dict[str, list[BackupChunk]]:
        """Its data messages by table, each in (stream, chunk) order: the order in which
        the last row of a key wins."""
        out: dict[str, list[BackupChunk]] = {}
        for chunk in self.messages(BackupMessageType.TABLE_DATA):
            out.setdefault(chunk.key.table_name or "", []).append(chunk)
        return out


@dataclass(frozen=True)
class DeltaPlan:
    """What the topic holds for one delta."""

    delta_num: int
    increments: tuple[Increment, ...]
    chosen: Increment | None
    refusal: str | None  # why no increment can be used (None: `chosen` is used)


class BackupIndex:
    """Every message of one datamart in a topic, by increment."""

    def __init__(self, datamart: str, *, max_messages: int = 10_000_000) -> None:
        self.datamart = datamart
        self.max_messages = max_messages
        self.increments: dict[tuple[str, int], Increment] = {}
        self.by_delta: dict[int, list[Increment]] = {}
        self.messages = 0
        self.other_datamarts: Counter[str] = Counter()
        self.undecodable: list[tuple[Place, str]] = []

    def add(self, chunk: BackupChunk) -> None:
        key = chunk.key
        if key.datamart != self.datamart:
            name = key.datamart
            if (
                name not in self.other_datamarts
                and len(self.other_datamarts) >= MAX_OTHER_DATAMARTS
            ):
                name = OTHERS
            self.other_datamarts[name] += 1
            return
        self.messages += 1
        if self.messages > self.max_messages:
            raise OverflowError(
                f"more than {self.max_messages} messages of {self.datamart} in the topic"
            )
        ident = (key.increment_id, key.delta_num)
        increment = self.increments.get(ident)
        if increment is None:
            increment = Increment(
                key.increment_id, key.delta_num, key.delta_date, int(key.stream_total)
            )
            self.increments[ident] = increment
            self.by_delta.setdefault(key.delta_num, []).append(increment)
        increment.add(chunk)

    def knows(self, key: BackupKey) -> bool:
        """Whether this chunk of this increment is already indexed (a later copy is a
        writer's retry: its body is neither staged nor read again)."""
        increment = self.increments.get((key.increment_id, key.delta_num))
        return increment is not None and (key.stream_number, key.chunk_number) in increment.chunks

    def refuse_key(self, place: Place, error: str) -> None:
        """A message whose key cannot be read: which increment it belongs to is unknown."""
        if len(self.undecodable) < 1000:
            self.undecodable.append((place, error))

    def deltas(self) -> list[int]:
        return sorted(self.by_delta)

    def delta(self, delta_num: int, *, increment_id: str | None = None) -> DeltaPlan:
        found = tuple(sorted(self.by_delta.get(delta_num, ()), key=lambda i: i.end))
        complete = [i for i in found if i.complete]
        if increment_id is not None:
            named = [i for i in complete if i.increment_id == increment_id]
            if named:
                return DeltaPlan(delta_num, found, named[0], None)
        if not found:
            return DeltaPlan(delta_num, found, None, "no increment of it is in the topic")
        if not complete:
            return DeltaPlan(delta_num, found, None, _why_incomplete(found))
        runs = {i.increment_id for i in complete}
        if delta_num == 0 and len(runs) > 1 and increment_id is None:
            return DeltaPlan(
                delta_num,
                found,
                None,
                f"delta 0 was written by {len(runs)} runs ({', '.join(sorted(runs))}): "
                "name the run to restore with --increment-id",
            )
        if len({i.content() for i in complete}) > 1:
            # Whoever can write the topic could append an increment that replaced the
            # delta in the next restore: different contents are never chosen between.
            which = "; ".join(_named(i) for i in complete)
            return DeltaPlan(
                delta_num,
                found,
                None,
                f"delta {delta_num} is in {len(complete)} complete increments that differ "
                f"({which}): name the one to restore with --increment-id",
            )
        return DeltaPlan(delta_num, found, complete[-1], None)

    def restorable(
        self, first: int, *, to_delta: int | None = None, increment_id: str | None = None
    ) -> tuple[list[DeltaPlan], DeltaPlan | None]:
        """The deltas a restore applies from `first` on, in order, and the first that stops
        it (None when it reaches the last delta of the topic, or `to_delta`)."""
        deltas = self.deltas()
        last = deltas[-1] if deltas else first - 1
        if to_delta is not None:
            last = min(last, to_delta)
        plans: list[DeltaPlan] = []
        for number in range(first, last + 1):
            plan = self.delta(number, increment_id=increment_id)
            if plan.chosen is None:
                return plans, plan
            plans.append(plan)
        return plans, None


def _named(increment: Increment) -> str:
    offset, partition = increment.end
    return (
        f"run {increment.increment_id} dated {increment.delta_date.isoformat()}, "
        f"its last message at partition {partition} offset {offset}"
    )


def _why_incomplete(increments: tuple[Increment, ...]) -> str:
    reasons = []
    for increment in increments:
        if increment.problems:
            reasons.append(f"run {increment.increment_id}: {increment.problems[0]}")
            continue
        gaps = [str(g) for g in increment.gaps()[:5]]
        reasons.append(f"run {increment.increment_id} lacks {', '.join(gaps)}")
    return "no complete increment: " + "; ".join(reasons)
