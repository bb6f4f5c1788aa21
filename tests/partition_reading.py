"""Reading partition 0 of a topic on the real broker, as aiokafka's consumer reads it or
taking its records a record batch at a time (`podd_kafka.record_runs`)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from podd_kafka.record_runs import RUNS, RecordRun


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
