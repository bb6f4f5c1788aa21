"""The timed parts of the end-to-end benchmark that talk to Kafka.

* `send_and_wait`: produce every chunk of a prepared delta, then wait for its `delta.in.rs`;
  timed from the first chunk produced to the answer received.
* `one_row_latency`: produce every chunk of a 1-row delta but the last, wait for the acks,
  then time from producing the last chunk to the answer.
* `delta_records`: a sent delta's messages read again from the broker (the floors,
  `bench.floors`, and the peer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from bench.e2e_data import PreparedDelta, delta_in_messages
from origin.client import OriginClient
from podd_kafka.client import aiokafka_options
from podd_kafka.settings import KafkaSettings
from protocol.messages import DeltaInResult


class BenchError(Exception):
    """The benchmark could not measure what it set out to (no answer, wrong answer)."""


@dataclass
class Sent:
    """Where a delta's messages landed: per partition, the first and last offset."""

    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    messages: int = 0

    def add(self, partition: int, offset: int) -> None:
        first, last = self.offsets.get(partition, (offset, offset))
        self.offsets[partition] = (min(first, offset), max(last, offset))
        self.messages += 1


@dataclass(frozen=True)
class Timed:
    seconds: float
    produce_seconds: float
    result: DeltaInResult
    sent: Sent


async def produce_chunks(
    client: OriginClient,
    messages: Iterable[tuple[bytes, bytes]],
    sent: Sent,
    *,
    interval: float = 0.0,
) -> None:
    """Produce every message, up to 64 unacknowledged at a time; with an `interval`, the
    n-th no sooner than n intervals after the first (an origin paced by its network)."""
    topic = client.settings.topic_delta_in
    window: list[asyncio.Future[object]] = []

    async def drain(keep: int) -> None:
        while len(window) > keep:
            meta = await window.pop(0)
            sent.add(meta.partition, meta.offset)  # type: ignore[attr-defined]

    started = time.perf_counter()
    for index, (key, value) in enumerate(messages):
        wait = started + index * interval - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        headers = client.sign(key, value)
        window.append(await client.producer.send(topic, key=key, value=value, headers=headers))
        await drain(64)
    await drain(0)


def check_answer(
    delta: PreparedDelta, result: DeltaInResult | None, timeout: float
) -> DeltaInResult:
    number = delta.transfer.manifest.delta_num
    if result is None:
        raise BenchError(f"delta {number}: no delta.in.rs within {timeout:g} s")
    if result.error_code is not None:
        raise BenchError(f"delta {number}: {result.error_code}: {result.error_message}")
    return result


async def send_and_wait(client: OriginClient, delta: PreparedDelta, timeout: float) -> Timed:
    request_id = delta.transfer.manifest.request_id
    sent = Sent()
    started = time.perf_counter()
    await produce_chunks(client, delta_in_messages(delta), sent)
    produced = time.perf_counter()
    result = check_answer(delta, await client.result(request_id, timeout), timeout)
    return Timed(time.perf_counter() - started, produced - started, result, sent)


async def one_row_latency(client: OriginClient, delta: PreparedDelta, timeout: float) -> float:
    topic = client.settings.topic_delta_in
    messages = list(delta_in_messages(delta))
    pending = [
        await client.producer.send(topic, key=k, value=v, headers=client.sign(k, v))
        for k, v in messages[:-1]
    ]
    await asyncio.gather(*pending)
    started = time.perf_counter()
    key, value = messages[-1]
    await client.producer.send(topic, key=key, value=value, headers=client.sign(key, value))
    result = await client.result(delta.transfer.manifest.request_id, timeout)
    seconds = time.perf_counter() - started
    check_answer(delta, result, timeout)
    return seconds


@asynccontextmanager
async def delta_records(
    settings: KafkaSettings, bootstrap: list[str], sent: Sent
) -> AsyncIterator[AsyncIterator[ConsumerRecord[bytes, bytes]]]:
    """The `delta.in` records of one sent delta, read again from the broker, partition by
    partition in offset order (no consumer group: assigned and sought)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        **aiokafka_options(settings),
    )
    await consumer.start()
    topic = settings.topic_delta_in
    partitions = {TopicPartition(topic, p): span for p, span in sent.offsets.items()}
    consumer.assign(list(partitions))
    for tp, (first, _) in partitions.items():
        consumer.seek(tp, first)

    async def records() -> AsyncIterator[ConsumerRecord[bytes, bytes]]:
        remaining = set(partitions)
        while remaining:
            batches = await consumer.getmany(*remaining, timeout_ms=1000)
            for tp, batch in batches.items():
                last = partitions[tp][1]
                for record in batch:
                    if record.offset > last:
                        break
                    yield record
                if batch and batch[-1].offset >= last:
                    remaining.discard(tp)

    try:
        yield records()
    finally:
        await consumer.stop()
