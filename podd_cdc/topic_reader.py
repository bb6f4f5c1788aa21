"""Reading CDC topics: every partition assigned (no consumer group: the cut log, not the
broker, remembers where the origin stands), partitions added while it reads picked up,
positions set by the caller, and which partitions are quiet (read to the end the broker last
reported, with nothing new for the settle time; a partition whose end was never reported is
not quiet).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from typing import Any

import structlog
from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.consumer.fetcher import FetchResult

from podd_cdc.cutlog import partition_key, split_key
from podd_cdc.source_consumer import consumer, partitions_of
from podd_kafka.record_runs import RecordRun, Records
from podd_kafka.settings import KafkaSettings

log = structlog.get_logger("podd_cdc")

#: Records taken from one partition per batch (`partition_records`).
FEWEST_RECORDS, MOST_RECORDS = 500, 8000


def partition_records(max_rows: int, *, on_arrays: bool) -> int:
    """Records taken from one partition per batch, for deltas of `max_rows` changes.

    What the run holds follows it (a batch of each partition on either side of the next
    delta). A cutter on arrays (`on_arrays`) takes an eighth of a delta, from
    `FEWEST_RECORDS` to `MOST_RECORDS`: each of its batches costs the same few dozen array
    steps per table, so a larger one is cheaper a message. The 300,000-change bench, in
    alternating runs: 42 and 45 µs of CPU a change at 2,000 against 51 and 65 at 500; then
    26.0, 30.2 and 27.6 at 8,000 against 32.1, 34.1 and 30.5 at 2,000 (20,100 changes/s
    end to end against 17,500, the origin's memory the same); at 12,500, 29.0 and 30.7
    against 30.4 and 30.0 at 8,000. The record path takes `FEWEST_RECORDS`: at 2,000 it
    was slower (55 and 58 µs against 52 and 53; 10-11,000 changes/s end to end against
    13,000), its longer batches holding the runner's cuts and sends back."""
    if not on_arrays:
        return FEWEST_RECORDS
    return min(MOST_RECORDS, max(FEWEST_RECORDS, max_rows // 8))


#: Event loop steps the consumer is given to send its next fetch (its fetch task wakes, makes
#: the request, and writes it).
FETCH_SEND_STEPS = 4

#: While partitions are held back, how long a wait for records runs before it carries what
#: arrived late for them (`TopicReader._wait`).
LATE_LOOK_MS = 10

#: How often the source topics are looked at for partitions added while the run reads.
PARTITION_LOOK_SECONDS = 10.0


class TopicReader:
    """The live reader: positions from the caller, quiet partitions, pause and resume."""

    def __init__(
        self,
        settings: KafkaSettings,
        bootstrap: list[str],
        settle: float,
        batch_records: int = FEWEST_RECORDS,
    ) -> None:
        """`batch_records`: records taken from one partition per batch (`runs`)."""
        self.settle = settle
        self.batch_records = batch_records
        self.reader = consumer(settings, bootstrap, runs=True)
        self.partitions: list[TopicPartition] = []
        self.position: dict[str, int] = {}
        self._topics: list[str] = []
        self._looked = time.monotonic()
        self._last_seen: dict[str, float] = {}
        self._paused: set[str] = set()
        #: Records fetched past a partition's last run, handed out first by the next one;
        #: dropped wherever the partition's position is set again.
        self._carried: dict[TopicPartition, Records] = {}
        #: The most records a piece of the partition held (`record_runs`), when last read.
        self._longest: dict[TopicPartition, int] = {}
        #: Partitions held back (`runs`), paused in the consumer, what it had fetched of
        #: them carried.
        self._holding: set[TopicPartition] = set()

    async def start(self, topics: list[str]) -> list[str]:
        await self.reader.start()
        self._topics = list(topics)
        self.partitions = await partitions_of(self.reader, topics)
        self.reader.assign(self.partitions)
        now = time.monotonic()
        for tp in self.partitions:
            self._last_seen[partition_key(tp.topic, tp.partition)] = now
        return [partition_key(tp.topic, tp.partition) for tp in self.partitions]

    async def added(self, every: float = PARTITION_LOOK_SECONDS) -> dict[str, int]:
        """Partitions added to the topics since they were last looked at (at most once per
        `every` seconds), now read from their first offset: key → that offset. Before,
        the partitions were fixed at start and a partition added meanwhile was never read,
        its changes never cut."""
        if time.monotonic() - self._looked < every:
            return {}
        self._looked = time.monotonic()
        await self.reader._client.force_metadata_update()
        known = set(self.partitions)
        new = [
            TopicPartition(topic, p)
            for topic in self._topics
            for p in sorted(self.reader.partitions_for_topic(topic) or ())
            if TopicPartition(topic, p) not in known
        ]
        if not new:
            return {}
        first = await self.reader.beginning_offsets(new)
        self.partitions += new
        self.reader.assign(self.partitions)  # a new assignment: positions and pauses anew
        self._carried.clear()
        self._holding.clear()
        now = time.monotonic()
        for tp in new:
            key = partition_key(tp.topic, tp.partition)
            self.position[key] = int(first[tp])
            self._last_seen[key] = now
        for tp in self.partitions:
            key = partition_key(tp.topic, tp.partition)
            self.reader.seek(tp, self.position[key])
            if key in self._paused:
                self.reader.pause(tp)
        found = {partition_key(tp.topic, tp.partition): int(first[tp]) for tp in new}
        log.warning("partitions added to the source topics are read now", partitions=found)
        return found

    async def stop(self) -> None:
        await self.reader.stop()

    async def first_offsets(self, latest: bool) -> dict[str, int]:
        tps = self.partitions
        found = await (
            self.reader.end_offsets(tps) if latest else self.reader.beginning_offsets(tps)
        )
        return {partition_key(tp.topic, tp.partition): int(found[tp]) for tp in tps}

    def seek(self, key: str, offset: int) -> None:
        tp = TopicPartition(*split_key(key))
        self.reader.seek(tp, offset)
        self._carried.pop(tp, None)
        self.position[key] = offset

    async def batch(self, timeout_ms: int = 100) -> list[ConsumerRecord[Any, Any]]:
        """The next records of every partition, in one list (`runs`)."""
        return [record for _, run in await self.runs(timeout_ms) for record in run]

    async def runs(
        self, timeout_ms: int = 100, held_back: Collection[str] = ()
    ) -> list[tuple[str, RecordRun]]:
        """The next records, by partition (its key, its records in offset order), up to
        `batch_records` from each; none from the partitions `held_back` (what was fetched
        of them is carried, one fetch each, `_hold`). aiokafka hands out a fetch
        partition by partition (16 MiB of one before the next), and the Qlik bound follows
        the partition read least far: taken evenly, the bound moves evenly and deltas keep
        their size in a backlog."""
        readable = [
            tp for tp in self.partitions if partition_key(tp.topic, tp.partition) not in held_back
        ] or self.partitions
        await self._hold(set(self.partitions) - set(readable))
        found: dict[TopicPartition, Records] = {}
        for tp in readable:
            if not self._is_paused(tp):
                found[tp] = await self._take(tp)
        if not any(found.values()):  # wait for a piece of records, then take a run after it
            for tp, batches in (await self._wait(readable, timeout_ms)).items():
                self._carried[tp] = Records(batches)
                found[tp] = await self._take(tp)
        now = time.monotonic()
        runs = []
        for tp, fetched in found.items():
            key = partition_key(tp.topic, tp.partition)
            if key in self._paused:
                continue  # fetched before the pause took effect: read again on resume
            if len(fetched) > self.batch_records:
                self._carried[tp] = fetched[self.batch_records :]
            items = fetched[: self.batch_records]
            if items:
                self._last_seen[key] = now
                self.position[key] = items.last_offset() + 1
                runs.append((key, RecordRun(tp.topic, tp.partition, items)))
        await self._read_ahead(readable)
        return runs

    async def _read_ahead(self, readable: list[TopicPartition]) -> None:
        """Carry what the consumer has fetched of the partitions that carry less than a run,
        and let it send its next fetch before the caller reads these runs. aiokafka fetches
        from a broker only once the records it fetched from it are taken, and the caller's
        reading holds the event loop: the next fetch went out, and the broker began on it,
        only once a run was read. What is carried stays bounded: under a run and one fetch
        a partition."""
        await self._carry(
            [
                tp
                for tp in readable
                if not self._is_paused(tp) and len(self._carried.get(tp, ())) < self.batch_records
            ]
        )
        for _ in range(FETCH_SEND_STEPS):
            await asyncio.sleep(0)

    async def _hold(self, held: set[TopicPartition]) -> None:
        """Pause the partitions newly `held` in the consumer, and carry what it had fetched of
        them (one fetch at most); resume the ones no longer held. aiokafka sends a broker no
        fetch while records it fetched from it wait untaken, until they are 100 ms old
        (`prefetch_backoff`): a partition held back with its fetch waiting kept the others
        from being fetched, and a 500,000-change backlog run read nothing for 1.3 s of its
        11 (13 waits of 100 ms)."""
        newly = held - self._holding
        await self._carry(newly)
        for tp in newly:
            self.reader.pause(tp)
            self._holding.add(tp)
        await self._carry_late()
        for tp in self._holding - held:
            self._holding.discard(tp)
            if not self._is_paused(tp):
                self.reader.resume(tp)

    async def _wait(
        self, readable: list[TopicPartition], timeout_ms: int
    ) -> dict[TopicPartition, list[Any]]:
        """The first piece of records fetched of `readable` within `timeout_ms` (`getmany`). While
        partitions are held, it waits in slices of `LATE_LOOK_MS`, carrying between them a
        held partition's late fetch (`_carry_late`): one that arrived during a single wait
        stopped every other fetch until the wait ended."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            slice_ms = min(LATE_LOOK_MS, left_ms) if self._holding else left_ms
            waited: dict[TopicPartition, list[Any]] = await self.reader.getmany(
                *readable, timeout_ms=slice_ms, max_records=1
            )
            if waited or slice_ms == left_ms:
                return waited
            await self._carry_late()

    async def _carry_late(self) -> None:
        """Take what the consumer fetched of a paused partition after its pause (a fetch sent
        before it). aiokafka keeps such records untaken and hands them out only once the
        partition is resumed, and until they are 100 ms old it sends the broker no other
        fetch: 8-20 waits of 100 ms with nothing read in a 500,000-change run. A held
        partition's are carried (resumed for as long as they are taken, with no step of the
        event loop between, so no fetch goes out for it); a paused one's (`pause`) are dropped,
        as it is read again from where it was paused. What a held partition carries stays
        under a run and one fetch: a fetch is sent for it only while it is not held."""
        late = [
            tp
            for tp, fetched in self.reader._fetcher._records.items()
            if type(fetched) is FetchResult
        ]
        held = [tp for tp in late if tp in self._holding and not self._is_paused(tp)]
        for tp in held:
            self.reader.resume(tp)
        try:
            await self._carry(held)
        finally:
            for tp in held:
                self.reader.pause(tp)
        if dropped := [tp for tp in late if self._is_paused(tp)]:
            await self.reader.getmany(*dropped, timeout_ms=0)  # the consumer drops them

    def _is_paused(self, tp: TopicPartition) -> bool:
        return partition_key(tp.topic, tp.partition) in self._paused

    async def _carry(self, tps: Collection[TopicPartition]) -> None:
        """Carry the records of `tps` the consumer has fetched and not handed out, after
        what each carries already."""
        if not tps:
            return  # (`getmany` of no partition is of every one)
        while found := await self.reader.getmany(*tps, timeout_ms=0):
            for tp, batches in found.items():
                carried = self._carried.setdefault(tp, Records())
                for batch in batches:
                    carried.add(batch)

    async def _take(self, tp: TopicPartition) -> Records:
        """Up to `batch_records` records of `tp` fetched already (and a piece's more, which
        `runs` carries to the next run): what was carried, then as many pieces of records
        as the last ones' size says fit, until the run is full or the fetch is used up."""
        taken = self._carried.pop(tp, Records())
        while len(taken) < self.batch_records:
            left = self.batch_records - len(taken)
            wanted = max(1, left // self._longest.get(tp, self.batch_records))
            batches = (await self.reader.getmany(tp, timeout_ms=0, max_records=wanted)).get(tp)
            if not batches:
                break
            self._longest[tp] = max(map(len, batches))
            for batch in batches:
                taken.add(batch)
            if len(batches) < wanted:
                break  # the fetch is used up
        return taken

    def pause(self, key: str, at: int) -> None:
        """Stop reading `key`; on resume it is read again from `at`."""
        tp = TopicPartition(*split_key(key))
        self.reader.pause(tp)
        self._carried.pop(tp, None)
        self._paused.add(key)
        self.position[key] = at

    def resume(self, key: str) -> None:
        if key in self._paused:
            self._paused.discard(key)
            self.seek(key, self.position[key])
            tp = TopicPartition(*split_key(key))
            if tp not in self._holding:
                self.reader.resume(tp)

    def is_paused(self, key: str) -> bool:
        """Whether `key` is paused (asked once per message: no copy of the set)."""
        return key in self._paused

    def lag(self) -> int:
        """Messages behind the end the broker last reported (0 where it has not yet)."""
        total = 0
        for tp in self.partitions:
            high = self.reader.highwater(tp)
            if high is not None:
                total += max(0, high - self.position.get(partition_key(tp.topic, tp.partition), 0))
        return total

    def quiet(self) -> set[str]:
        """Partitions read to the broker's last reported end, with nothing new for `settle`."""
        now = time.monotonic()
        found = set()
        for tp in self.partitions:
            key = partition_key(tp.topic, tp.partition)
            if key in self._paused:
                continue
            high = self.reader.highwater(tp)  # None: not reported yet, so not read to it
            caught_up = high is not None and self.position.get(key, 0) >= high
            if caught_up and now - self._last_seen[key] >= self.settle:
                found.add(key)
        return found

    def last_arrival(self) -> float:
        return max(self._last_seen.values(), default=time.monotonic())
