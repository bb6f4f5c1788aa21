"""Messages written together on the real broker, so that a record batch holds many of them,
and partition 0 read back, as aiokafka's consumer reads it or taking its records a record
batch at a time (`podd_kafka.record_runs`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from podd_kafka.record_runs import RUNS, RecordRun


async def send_together(
    broker: str, topic: str, messages: Iterable[dict[str, Any]], compression: str | None = None
) -> None:
    """Send every message (`AIOKafkaProducer.send`'s keyword arguments) before waiting for
    any, so that each partition's come in record batches of many records."""
    producer = AIOKafkaProducer(
        bootstrap_servers=broker, compression_type=compression, linger_ms=50
    )
    await producer.start()
    try:
        sent = [await producer.send(topic, **message) for message in messages]
        await producer.flush()
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def read_partition(
    bootstrap: list[str] | str, topic: str, start: int, expected: int, runs: bool = False
) -> tuple[list[Any], int]:
    """The `expected` records of partition 0 from offset `start`, as `ConsumerRecord`s (and
    nothing after them), and how many items the consumer's `getmany` gave for them."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
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
            while len(found) < expected:
                got = (await consumer.getmany(tp, timeout_ms=500)).get(tp, [])
                items += len(got)
                if runs:
                    got = [made for batch in got for made in RecordRun(topic, 0, batch)]
                found += got
        assert not await consumer.getmany(timeout_ms=1000)  # and nothing after them
    finally:
        await consumer.stop()
    return found, items
