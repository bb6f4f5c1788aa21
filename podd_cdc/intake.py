"""The reading side of a CDC run: every message decoded and fed to the cutter.

Bad input stops reading its partition (`blocked`: the runner cuts what it still can, then
stops with the error) or, with a dead-letter topic, goes there; a change that breaks the
source's order (`podd_cdc.sequence_guard`) or a schema change always stops it. A Qlik
data message whose metadata is not read yet pauses its partition (`waiting`) until the
metadata comes or the wait bound passes; then it is bad input. The metadata messages read
are kept durably (`podd_cdc.catalog`), so a restarted run knows tables described before
its start.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from origin.client import OriginClient
from podd_cdc import dataworks_batch_intake, qlik_batch_intake
from podd_cdc.catalog import QlikCatalog
from podd_cdc.cutlog import partition_key
from podd_cdc.cutters import AnyCutter
from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.dataworks_array_cutter import DataWorksArrayCutter
from podd_cdc.errors import AwaitingMetadata, BadInput, SchemaStop, SequenceStop
from podd_cdc.options import CdcOptions, CdcStats
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_array_cutter import QlikArrayCutter
from podd_cdc.records import Position, TableSeen
from podd_cdc.topic_reader import TopicReader
from podd_kafka.record_runs import RecordRun
from protocol.schema import LogicalSchema

#: A fetch: each partition's key and run of records.
Runs = list[tuple[str, RecordRun]]

log = structlog.get_logger("podd_cdc")

#: A dead letter larger than a broker's default message size is cut to its first 64 KiB
#: (header `podd-truncated-from` gives the size): the source topic may take larger messages
#: than the dead-letter topic does.
DEAD_LETTER_MAX_BYTES = 1_000_000
DEAD_LETTER_KEPT_BYTES = 64 << 10
#: Read batches a fetch gets at most (`Intake._read_fetch`): each costs the same few
#: dozen array steps per table, so a fetch whose every message is judged exactly costs at
#: most this many batches more.
BATCH_ROUNDS = 4


def make_decoder(
    options: CdcOptions, schema: LogicalSchema | None, *, catalog: bool = True
) -> QlikDecoder | DataWorksDecoder:
    """The format's decoder; for Qlik with the tables learnt in earlier runs (`catalog`)."""
    if options.fmt == "qlik":
        decoder = QlikDecoder(schema, options.topic_tables)
        if catalog:
            for message in QlikCatalog(options.state_dir).messages:
                decoder.learn(message)
        return decoder
    return DataWorksDecoder(schema)


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


@dataclass(frozen=True)
class Handoff:
    """The runner's and the intake's signals to each other. The runner sets `delta_waiting`
    while a cut delta waits to be sent; the intake sets `fed` after each batch it feeds, so
    that the runner looks for a due delta before the next batch, not at its next tick (a
    batch takes about 20 ms, the tick is 50: one backlog run held 7,500 changes for deltas of
    2,000 while the runner slept). `chunks_out` is clear while a delta's chunks are being
    produced: the intake feeds no batch meanwhile, since the producer's sender shares the
    event loop with it, and the replica cannot load the delta until its last chunk is on
    the broker (100 chunks took 0.4-0.7 s to produce between the intake's batches, 0.08 s
    alone)."""

    delta_waiting: asyncio.Event = field(default_factory=asyncio.Event)
    fed: asyncio.Event = field(default_factory=asyncio.Event)
    chunks_out: asyncio.Event = field(default_factory=_set_event)

    async def next_batch(self, timeout: float) -> None:
        """Wait until the intake feeds a batch or `timeout` passes. The runner's own task
        waits on the event, so it runs before the intake's next batch."""
        tick = asyncio.get_running_loop().call_later(timeout, self.fed.set)
        try:
            await self.fed.wait()
        finally:
            tick.cancel()
            self.fed.clear()


class Intake:
    def __init__(
        self, options: CdcOptions, schema: LogicalSchema, client: OriginClient, stats: CdcStats
    ) -> None:
        self.options = options
        self.client = client
        self.stats = stats
        self.decoder = make_decoder(options, schema)
        self.blocked: dict[str, BadInput] = {}  # partition → why its reading stopped
        self.waiting: dict[str, tuple[int, float]] = {}  # partition → (offset, since)
        self._expired: set[tuple[str, int]] = set()  # waited past the bound: bad input
        self._catalog = QlikCatalog(options.state_dir) if options.fmt == "qlik" else None
        #: While partitions are held back: the key that holds the bound, and since when.
        self._behind: tuple[Any, float] | None = None

    async def run(self, reader: TopicReader, cutter: AnyCutter, handoff: Handoff) -> None:
        """Read, decode and feed until cancelled. Back-pressure while the cutter is full, and
        while a cut delta waits to be sent (`delta_waiting`) and the next one's worth of
        changes (`max_rows`) is held: reading further ahead then only grows what the run
        holds, so its memory follows the settings, not the backlog's size."""
        while True:
            await handoff.chunks_out.wait()  # a delta's chunks are produced first
            if self._must_wait(cutter, handoff):
                await asyncio.sleep(0.05)  # back-pressure: the next cut or send frees room
                continue
            self._check_waits(reader)
            for key, offset in (await reader.added()).items():
                cutter.add_partition(key, offset)
            runs = await reader.runs(held_back=self._held_back(reader, cutter))
            if runs and self.stats.first_read is None:
                self.stats.first_read = time.monotonic()
            self.stats.messages += sum(len(messages) for _, messages in runs)
            await self._read_fetch(reader, cutter, runs, datetime.now(UTC))
            self.stats.held_peak = max(self.stats.held_peak, cutter.pending)
            if runs:
                handoff.fed.set()
            # A fetch read ahead is handed out without waiting: yield, so the runner looks
            # for a due delta between two batches (without it, one backlog run held 198,000
            # changes before its first cut of 100,000).
            await asyncio.sleep(0)

    async def _read_fetch(
        self, reader: TopicReader, cutter: AnyCutter, runs: Runs, wall: datetime
    ) -> None:
        """Feed a fetch's runs. The Qlik cutter on arrays holds each run's first messages
        from a read batch (`_hold_fetch`); the message it was not sure of is read by the
        exact decoder (with the messages right after it the kernel did not read), and the
        rest of the fetch is read as a batch again, up to `BATCH_ROUNDS` batches (table
        descriptions, read exactly, make the messages after them sure). What is left then
        is read a message at a time."""
        for _ in range(BATCH_ROUNDS):
            held = self._hold_fetch(reader, cutter, runs, wall)
            if not held:
                break
            rest = []
            for key, messages in runs:
                first, exactly = held.get(key, (0, len(messages)))
                left = messages[first:]
                await self._read_run(reader, cutter, key, left[:exactly], wall)
                if left[exactly:] and key not in self.blocked and not reader.is_paused(key):
                    rest.append((key, left[exactly:]))
            runs = rest
        for key, messages in runs:
            await self._read_run(reader, cutter, key, messages, wall)

    def _hold_fetch(
        self, reader: TopicReader, cutter: AnyCutter, runs: Runs, wall: datetime
    ) -> dict[str, tuple[int, int]]:
        """A cutter on arrays: each run's first messages held from one read batch of the
        fetch, where it can (`qlik_batch_intake.hold_fetch`,
        `dataworks_batch_intake.hold_fetch`); per partition, how many, and how many after
        them are for the exact decoder."""
        started = time.monotonic()
        open_runs = [(k, ms) for k, ms in runs if k not in self.blocked and not reader.is_paused(k)]
        decoder = self.decoder
        if isinstance(cutter, QlikArrayCutter) and isinstance(decoder, QlikDecoder):
            held = qlik_batch_intake.hold_fetch(decoder, cutter, open_runs, started, wall)
        elif isinstance(cutter, DataWorksArrayCutter) and isinstance(decoder, DataWorksDecoder):
            held = dataworks_batch_intake.hold_fetch(decoder, cutter, open_runs, started, wall)
        else:
            return {}
        for key, (count, _) in held.items():
            if count:
                self.waiting.pop(key, None)
                self.stats.batched += count
        self.stats.cut_seconds += time.monotonic() - started  # read and held at once
        return held

    def _must_wait(self, cutter: AnyCutter, handoff: Handoff) -> bool:
        """Whether reading waits (the cutter is full, or a delta waits to be sent and the
        next one's worth is held). The time it waits does not count as the bound standing
        still (`_held_back`): an agent taking longer than the settle time to apply a delta
        would otherwise let every partition be read ahead when reading resumed."""
        waits = cutter.full or (handoff.delta_waiting.is_set() and cutter.holds_a_delta)
        if waits:
            self._behind = None
        return waits

    def _held_back(self, reader: TopicReader, cutter: AnyCutter) -> set[str]:
        """Once a delta's worth of changes is held, the partitions read ahead of the bound
        wait (`Cutter.ahead`) while the ones behind it are read: the fetcher hands partitions
        out unevenly, and one 300,000-change backlog held 173,000 changes before the bound
        let 100,000 be cut. Not while a partition waits for a table's metadata, which any
        partition may carry, nor while one is stopped by bad input: the run ends with it
        once the others are read to their end. A partition read again once metadata came
        waits only for its next fetch, and the others are held back meanwhile: in one run,
        the three others were read to their end (9,000 changes, deltas of 3,000) while it
        waited 0.4 s for that fetch."""
        # Waiting and resumed (a table's metadata came): it waits for its fetch, not metadata.
        awaiting = any(reader.is_paused(key) for key in self.waiting)
        if not cutter.holds_a_delta or awaiting or self.blocked:
            self._behind = None
            return set()
        ahead, lowest = cutter.ahead(reader.quiet())
        now = time.monotonic()
        if self._behind is None or self._behind[0] != lowest:
            self._behind = (lowest, now)
        if now - self._behind[1] > self.options.settle:
            # The bound has not moved for the settle time: a partition that delivers messages
            # but no key (each one bad, sent to the dead-letter topic) must not keep the
            # others unread for ever. Reading on, the run stops at `max_pending`, as before.
            return set()
        return ahead

    async def _read_run(
        self, reader: TopicReader, cutter: AnyCutter, key: str, messages: RecordRun, wall: datetime
    ) -> None:
        """Decode, check and feed one partition's records, in offset order; a message that
        pauses or blocks the partition leaves the rest of the run unread."""
        parse = feed = 0.0
        started = time.monotonic()
        topic, partition = messages.topic, messages.partition
        for k, message in enumerate(messages.records):  # a ConsumerRecord only where needed
            if key in self.blocked or reader.is_paused(key):
                break  # read again from the pausing message on resume
            at = Position(topic, partition, message.offset)
            try:
                record = self.decoder.decode(topic, message.value)
                cutter.check(at, record, wall, key)
            except AwaitingMetadata as exc:
                if (key, message.offset) in self._expired:
                    self._expired.discard((key, message.offset))
                    late = BadInput(
                        at,
                        f"a data message whose table's metadata ({exc.key}) "
                        f"did not arrive within {self.options.metadata_wait:g} s",
                    )
                    await self._bad(reader, cutter, late, messages[k])
                else:
                    self._await_metadata(reader, key, message.offset)
                started = time.monotonic()
                continue
            except BadInput as exc:
                await self._bad(reader, cutter, exc.located(at), messages[k])
                started = time.monotonic()
                continue
            decoded = time.monotonic()
            parse += decoded - started
            self.waiting.pop(key, None)
            if isinstance(record, TableSeen):
                self._remember(record, reader)
            cutter.feed(at, record, decoded, len(message.value or b""), key)
            started = time.monotonic()
            feed += started - decoded
        self.stats.parse_seconds += parse
        self.stats.cut_seconds += feed

    def _await_metadata(self, reader: TopicReader, key: str, offset: int) -> None:
        """Partition `key` waits at `offset` for its table's metadata (since the first time,
        however often it is read again)."""
        reader.pause(key, offset)
        self.waiting.setdefault(key, (offset, time.monotonic()))

    def _check_waits(self, reader: TopicReader) -> None:
        """A partition waiting past the bound is read again: its message is then bad input."""
        now = time.monotonic()
        for key, (offset, since) in list(self.waiting.items()):
            if now - since > self.options.metadata_wait:
                del self.waiting[key]
                self._expired.add((key, offset))
                reader.resume(key)

    def _remember(self, seen: TableSeen, reader: TopicReader) -> None:
        if self._catalog is not None:
            self._catalog.add(seen.source)
        for key in list(self.waiting):
            reader.resume(key)  # read the waiting message again, now that a table is known

    async def _bad(
        self, reader: TopicReader, cutter: AnyCutter, exc: BadInput, message: Any
    ) -> None:
        key = partition_key(message.topic, message.partition)
        if self.options.dead_letter_topic is None or isinstance(exc, SchemaStop | SequenceStop):
            reader.pause(key, message.offset)
            self.blocked[key] = exc
            log.error("bad input: reading of the partition stopped", error=str(exc))
            return
        headers = [
            ("podd-source", f"{message.topic}:{message.partition}:{message.offset}".encode()),
            ("podd-error", exc.reason[:1000].encode()),
        ]
        value = message.value
        if value is not None and len(value) > DEAD_LETTER_MAX_BYTES:
            headers.append(("podd-truncated-from", str(len(value)).encode()))
            value = value[:DEAD_LETTER_KEPT_BYTES]
        await self.client.producer.send_and_wait(
            self.options.dead_letter_topic, key=message.key, value=value, headers=headers
        )
        cutter.passed(exc.at or Position(message.topic, message.partition, message.offset))
        self.stats.dead_lettered += 1
        log.warning(
            "bad input sent to the dead-letter topic",
            error=str(exc),
            topic=self.options.dead_letter_topic,
            count=self.stats.dead_lettered,
        )
