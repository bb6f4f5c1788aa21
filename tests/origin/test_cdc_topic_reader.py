"""The CDC topic reader on the real broker: partitions added while it reads are picked up
from their first offset (existing positions kept), and a partition whose end the broker never
reported is not quiet.

Tansu has no CreatePartitions, so a partition is "added" here by a reader that knew fewer
partitions at its start than the topic has: what `added` does next (assign, seek, read) is
the same either way."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable

from aiokafka import AIOKafkaProducer, TopicPartition

from podd_cdc.cutlog import partition_key
from podd_cdc.topic_reader import TopicReader, partition_records
from podd_kafka.settings import KafkaSettings
from tests.batched_io import send_together


async def fill(broker: str, topic: str, per_partition: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for partition in range(4):  # the embedded broker makes 4 partitions per topic
            for n in range(per_partition):
                await producer.send_and_wait(
                    topic, f"{partition}-{n}".encode(), partition=partition
                )
    finally:
        await producer.stop()


@contextlib.asynccontextmanager
async def reader_from_start(
    broker: str, topic: str, settle: float, batch: int = 500
) -> AsyncIterator[TopicReader]:
    """A started reader of `topic`, every partition at offset 0; stopped on leaving."""
    reader = TopicReader(KafkaSettings(broker=broker), [broker], settle, batch)
    await reader.start([topic])
    try:
        for tp in reader.partitions:
            reader.seek(partition_key(tp.topic, tp.partition), 0)
        yield reader
    finally:
        await reader.stop()


async def read_all(reader: TopicReader, wanted: int, seconds: float = 30) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + seconds
    while len(values) < wanted and time.monotonic() < deadline:
        values += [m.value for m in await reader.batch()]
    return values


def test_partitions_added_while_reading_are_read_from_their_start(broker: str) -> None:
    topic = f"cdc-added-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[list[bytes], dict[str, int], list[bytes]]:
        await fill(broker, topic, 3)
        reader = TopicReader(KafkaSettings(broker=broker), [broker], settle=0.1)
        await reader.start([topic])
        assert len(reader.partitions) == 4
        reader.partitions = reader.partitions[:2]  # as if the topic had 2 at the start
        reader.reader.assign(reader.partitions)
        for tp in reader.partitions:
            reader.seek(partition_key(tp.topic, tp.partition), 1)  # a position to keep
        try:
            before = await read_all(reader, 4)
            added = await reader.added(every=0)
            after = await read_all(reader, 6)
        finally:
            await reader.stop()
        return before, added, after

    before, added, after = asyncio.run(scenario())
    assert sorted(before) == [b"0-1", b"0-2", b"1-1", b"1-2"]
    assert added == {f"{topic}:2": 0, f"{topic}:3": 0}
    assert sorted(after) == [b"2-0", b"2-1", b"2-2", b"3-0", b"3-1", b"3-2"]  # no re-reads


def test_a_partition_whose_end_was_never_reported_is_not_quiet(broker: str) -> None:
    topic = f"cdc-quiet-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[set[str], set[str]]:
        await fill(broker, topic, 1)
        async with reader_from_start(broker, topic, settle=0.0) as reader:
            reader.reader.pause(*reader.partitions[1:])  # never fetched: no end reported
            unknown = {partition_key(tp.topic, tp.partition) for tp in reader.partitions[1:]}
            await read_all(reader, 1)
            await asyncio.sleep(0.2)
            first = TopicPartition(topic, 0)
            assert reader.reader.highwater(first) is not None
            assert all(reader.reader.highwater(tp) is None for tp in reader.partitions[1:])
            return reader.quiet(), unknown

    quiet, unknown = asyncio.run(scenario())
    assert f"{topic}:0" in quiet
    assert not quiet & unknown  # before: counted as caught up, and the bound ran past them


def test_partitions_held_back_wait_and_are_read_once_released(broker: str) -> None:
    topic = f"cdc-held-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        await fill(broker, topic, 3)
        held = {f"{topic}:1", f"{topic}:2", f"{topic}:3"}
        async with reader_from_start(broker, topic, settle=0.1) as reader:
            first: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(first) < 3 and time.monotonic() < deadline:
                runs = await reader.runs(held_back=held)
                first += [m.value for _, run in runs for m in run]
            await asyncio.sleep(0.5)  # the others' fetches have arrived meanwhile
            first += [m.value for _, run in await reader.runs(held_back=held) for m in run]
            rest = await read_all(reader, 9)
        return first, rest

    first, rest = asyncio.run(scenario())
    assert sorted(first) == [b"0-0", b"0-1", b"0-2"]
    assert sorted(rest) == sorted(f"{p}-{n}".encode() for p in (1, 2, 3) for n in range(3))


def test_a_batch_takes_at_most_its_records_of_a_partition(broker: str) -> None:
    topic = f"cdc-batch-{uuid.uuid4().hex[:8]}"

    async def scenario() -> list[list[bytes]]:
        await fill(broker, topic, 7)
        runs: list[list[bytes]] = []
        async with reader_from_start(broker, topic, settle=0.1, batch=3) as reader:
            deadline = time.monotonic() + 30
            while sum(map(len, runs)) < 28 and time.monotonic() < deadline:
                runs += [[m.value for m in run] for _, run in await reader.runs()]
        return runs

    runs = asyncio.run(scenario())
    assert sorted(v for run in runs for v in run) == sorted(
        f"{p}-{n}".encode() for p in range(4) for n in range(7)
    )
    assert max(map(len, runs)) == 3


def test_runs_split_record_batches_and_hand_out_the_rest_next_in_order(broker: str) -> None:
    """A run smaller than a record batch: the rest of the batch comes in the next runs, in
    order, each record once; a seek drops what was carried, so reading starts where it
    says (partition 0 is read from inside a batch, partition 1 sought back)."""
    topic = f"cdc-carry-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[dict[int, list[int]], int, int]:
        messages = [
            {"value": f"{p}-{n}".encode(), "partition": p} for p in range(4) for n in range(40)
        ]
        await send_together(broker, topic, messages)
        offsets: dict[int, list[int]] = {p: [] for p in range(4)}
        runs: list[int] = []

        async def read_until(enough: Callable[[], bool]) -> None:
            deadline = time.monotonic() + 30
            while not enough() and time.monotonic() < deadline:
                for key, run in await reader.runs():
                    offsets[int(key.rsplit(":", 1)[1])] += run.offsets()
                    runs.append(len(run))

        async with reader_from_start(broker, topic, settle=0.1, batch=7) as reader:
            reader.seek(f"{topic}:0", 5)
            await read_until(lambda: len(offsets[1]) >= 14)
            reader.seek(f"{topic}:1", 3)
            again = len(offsets[1])
            await read_until(lambda: sum(map(len, offsets.values())) >= 35 + 80 + again + 37)
        return offsets, again, max(runs)

    offsets, again, longest = asyncio.run(scenario())
    assert longest == 7
    assert offsets[0] == list(range(5, 40))
    assert offsets[2] == offsets[3] == list(range(40))
    assert offsets[1][again:] == list(range(3, 40))
    assert offsets[1][:again] == list(range(again))


def test_a_partitions_batch_on_arrays_is_an_eighth_of_a_delta_within_bounds() -> None:
    assert partition_records(100_000, on_arrays=False) == 500
    found = [
        partition_records(n, on_arrays=True) for n in (60, 4000, 8000, 12_000, 64_000, 100_000)
    ]
    assert found == [500, 500, 1000, 1500, 8000, 8000]


def test_a_partition_held_back_is_paused_with_its_fetch_carried(broker: str) -> None:
    """aiokafka fetches nothing from a broker while records fetched from it wait untaken
    (for 100 ms): a partition held back is paused in the consumer and what was fetched of it
    is carried, so the others are fetched meanwhile; released, it is resumed and its
    records are handed out from where it stood, each once."""
    topic = f"cdc-pause-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[set[TopicPartition], set[TopicPartition], list[bytes]]:
        await fill(broker, topic, 3)
        held = {f"{topic}:1"}
        async with reader_from_start(broker, topic, settle=0.1) as reader:
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(values) < 9 and time.monotonic() < deadline:
                values += [m.value for _, run in await reader.runs(held_back=held) for m in run]
            paused = set(reader.reader.paused())
            fetcher_records = set(reader.reader._fetcher._records)
            values += await read_all(reader, 3)
            assert not reader.reader.paused()
        return paused, fetcher_records, values

    paused, fetcher_records, values = asyncio.run(scenario())
    one = TopicPartition(topic, 1)
    assert paused == {one}
    assert one not in fetcher_records
    assert sorted(values) == sorted(f"{p}-{n}".encode() for p in range(4) for n in range(3))
    assert values[9:] == [b"1-0", b"1-1", b"1-2"]


@contextlib.asynccontextmanager
async def long_polling_reader(broker: str, topic: str) -> AsyncIterator[TopicReader]:
    """A started reader of a new `topic` with nothing to read, whose consumer has a fetch of
    every partition waiting (up to 3 s) at the broker: the fetch a test's pause comes after."""
    await send_together(broker, topic, [{"value": b"x", "partition": 2}])  # the topic
    settings = KafkaSettings(broker=broker, fetch_max_wait_ms=3000)
    reader = TopicReader(settings, [broker], 0.1, 500)
    await reader.start([topic])
    try:
        for tp in reader.partitions:
            reader.seek(partition_key(tp.topic, tp.partition), 1 if tp.partition == 2 else 0)
        assert not await reader.runs(timeout_ms=200)  # a fetch of every partition waits
        yield reader
    finally:
        await reader.stop()


def test_a_held_partitions_late_fetch_is_carried_not_left_to_stop_the_others(broker: str) -> None:
    """A fetch sent before a partition is held back answers for it after the pause. aiokafka
    keeps such records untaken, sending no other fetch for 100 ms: the reader carries them
    (here: a long-polling fetch of the empty topic, answered once partition 1 has records,
    after it is held). Released, they are handed out once, in order, and not fetched again."""
    topic = f"cdc-late-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[list[int], bool, list[bytes]]:
        async with long_polling_reader(broker, topic) as reader:
            held = {f"{topic}:1"}
            assert not await reader.runs(timeout_ms=0, held_back=held)  # paused: none sent
            await send_together(
                broker, topic, [{"value": f"1-{n}".encode(), "partition": 1} for n in range(3)]
            )
            one = TopicPartition(topic, 1)
            deadline = time.monotonic() + 20
            while len(reader._carried.get(one, ())) < 3 and time.monotonic() < deadline:
                assert not await reader.runs(timeout_ms=100, held_back=held)
            carried = [record.offset for record in reader._carried.get(one, ())]
            untaken = one in reader.reader._fetcher._records
            values = await read_all(reader, 3)
            await asyncio.sleep(0.5)  # a fetch of partition 1 again would answer meanwhile
            values += await read_all(reader, 4, seconds=1)
        return carried, untaken, values

    carried, untaken, values = asyncio.run(scenario())
    assert carried == [0, 1, 2]
    assert not untaken
    assert values == [b"1-0", b"1-1", b"1-2"]


def test_a_paused_partitions_late_fetch_is_dropped_and_read_again_on_resume(broker: str) -> None:
    """A partition paused by the caller (`pause`: read again from where it stopped) whose
    fetch answers after the pause: the reader has the consumer drop that answer (a wait for
    records did so before, `_carry_late` now at every run), so nothing dropped is lost: on
    resume every record is read from the paused offset, once each, in order."""
    topic = f"cdc-late-pause-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[bool, list[bytes]]:
        async with long_polling_reader(broker, topic) as reader:
            reader.pause(f"{topic}:1", 0)
            await send_together(
                broker, topic, [{"value": f"1-{n}".encode(), "partition": 1} for n in range(3)]
            )
            deadline = time.monotonic() + 5  # past the fetch's longest wait
            while time.monotonic() < deadline:
                assert not await reader.runs(timeout_ms=100)
            untaken = TopicPartition(topic, 1) in reader.reader._fetcher._records
            reader.resume(f"{topic}:1")
            values = await read_all(reader, 3)
            await asyncio.sleep(0.5)
            values += await read_all(reader, 4, seconds=1)
        return untaken, values

    untaken, values = asyncio.run(scenario())
    assert not untaken
    assert values == [b"1-0", b"1-1", b"1-2"]
