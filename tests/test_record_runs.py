"""Records taken a record batch at a time (`podd_kafka.record_runs`) on the real broker: the
same records, with the same fields, as aiokafka's own consumer gives, from a fetch offset
inside a compressed batch; the batches' lists are what `max_records` counts."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from podd_kafka.batch_guard import BatchGuard, install
from podd_kafka.record_runs import RUNS, RecordRun

PER_PARTITION = 60


async def _fill(broker: str, topic: str) -> None:
    """Each partition's records sent together, so that a record batch holds many of them."""
    producer = AIOKafkaProducer(bootstrap_servers=broker, compression_type="gzip", linger_ms=50)
    await producer.start()
    try:
        sent = [
            await producer.send(
                topic,
                f"value-{p}-{n}".encode() * (n % 3),  # every third value empty
                key=None if n % 4 == 0 else f"key-{n}".encode(),
                partition=p,
                headers=[("h", f"{n}".encode())] if n % 2 else [],
            )
            for p in range(2)
            for n in range(PER_PARTITION)
        ]
        await producer.flush()
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def _read(broker: str, topic: str, start: int, runs: bool) -> tuple[list[Any], int]:
    """Partition 0's records from `start`, as `ConsumerRecord`s, and how many items the
    consumer's `getmany` gave."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker,
        enable_auto_commit=False,
        fetch_max_wait_ms=50,
        value_deserializer=RUNS if runs else None,
    )
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, start)
    found: list[Any] = []
    items = 0
    try:
        async with asyncio.timeout(60):
            while len(found) < PER_PARTITION - start:
                got = (await consumer.getmany(tp, timeout_ms=500)).get(tp, [])
                items += len(got)
                if runs:
                    got = [made for batch in got for made in RecordRun(topic, 0, batch)]
                found += got
    finally:
        await consumer.stop()
    return found, items


def test_record_runs_give_aiokafkas_records_from_inside_a_batch(broker: str) -> None:
    install(BatchGuard())
    topic = f"runs-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[list[Any], list[Any], int]:
        await _fill(broker, topic)
        plain, _ = await _read(broker, topic, 7, runs=False)
        taken, items = await _read(broker, topic, 7, runs=True)
        return plain, taken, items

    plain, taken, items = asyncio.run(scenario())
    assert [r.offset for r in plain] == list(range(7, PER_PARTITION))
    assert taken == plain  # every field: key, value, sizes, headers, timestamps
    assert items < len(plain) / 4  # a list a record batch, not a record each
    assert any(r.headers for r in taken)
    assert any(r.key is None for r in taken)


def test_a_record_run_slices_and_hands_out_values_and_offsets() -> None:
    class Made:
        def __init__(self, offset: int, value: bytes | None) -> None:
            self.offset, self.value, self.key = offset, value, b"k"
            self.timestamp, self.timestamp_type, self.checksum = 5, 0, None
            self.headers = [("h", b"1")]

    run = RecordRun("t", 3, [Made(10, b"a"), Made(11, None), Made(12, b"ccc")])
    assert run.values() == [b"a", None, b"ccc"]
    assert run.offsets() == [10, 11, 12]
    tail = run[1:]
    assert isinstance(tail, RecordRun)
    assert tail.offsets() == [11, 12]
    made = run[2]
    assert (made.topic, made.partition, made.offset, made.value) == ("t", 3, 12, b"ccc")
    assert (made.serialized_value_size, made.serialized_key_size, made.headers) == (
        3,
        1,
        (("h", b"1"),),
    )
    assert [m.serialized_value_size for m in run] == [1, -1, 3]
    assert not run[3:]
