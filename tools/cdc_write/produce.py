"""Producing written CDC messages to a topic, as the vendor's writer would (its partitions,
its compression), and saying at which offset each message landed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from aiokafka import AIOKafkaProducer

from podd_kafka.client import aiokafka_options, partition_count
from podd_kafka.settings import KafkaSettings
from tools.cdc_write.qlik_writer import Written

Compression = Literal["gzip", "snappy", "lz4", "zstd"] | None


@dataclass(frozen=True)
class Landed:
    written: Written
    partition: int
    offset: int


async def produce(
    settings: KafkaSettings,
    bootstrap: list[str],
    topic: str,
    partitions: int,
    messages: Iterable[Written],
    *,
    compression: Compression = None,
    batch: int = 2000,
) -> list[Landed]:
    """Create `topic` with `partitions` if it is missing, then produce `messages` in order."""
    found = await partition_count(settings, bootstrap, topic, create_with=partitions)
    if found is not None and found < partitions:
        raise ValueError(f"topic {topic} has {found} partitions, fewer than {partitions}")
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        compression_type=compression,
        max_request_size=32 << 20,
        **aiokafka_options(settings),
    )
    await producer.start()
    landed: list[Landed] = []
    try:
        pending: list[tuple[Written, asyncio.Future[object]]] = []

        async def settle() -> None:
            for item, future in pending:
                metadata = await future
                landed.append(Landed(item, metadata.partition, metadata.offset))  # type: ignore[attr-defined]
            pending.clear()

        for item in messages:
            future = await producer.send(
                topic, key=item.key, value=item.value, partition=item.partition
            )
            pending.append((item, future))
            if len(pending) >= batch:
                await settle()
        await settle()
    finally:
        await producer.stop()
    return landed
