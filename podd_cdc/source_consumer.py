"""The CDC origin's consumer of its source topics: every partition assigned by the caller, no
consumer group (the cut log, not the broker, remembers where the origin stands), record
batches read through the batch guard; and the messages of a recorded delta's spans read back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from podd_cdc.cutlog import Span, partition_key, split_key
from podd_cdc.errors import CdcError
from podd_kafka.batch_guard import guard_batches
from podd_kafka.client import aiokafka_options
from podd_kafka.record_runs import RUNS
from podd_kafka.settings import KafkaSettings

#: The largest message read (a Kafka fetch of one partition); larger ones cannot be read.
MAX_MESSAGE_BYTES = 16 << 20


def consumer(
    settings: KafkaSettings, bootstrap: list[str], *, runs: bool = False
) -> AIOKafkaConsumer:
    """A consumer of the source topics; `runs`: one that hands out its records a record batch
    at a time (`podd_kafka.record_runs`)."""
    guard_batches(settings)
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        value_deserializer=RUNS if runs else None,
        **aiokafka_options(settings),
    )


async def partitions_of(reader: AIOKafkaConsumer, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of `topics`; a topic that does not exist is an error, never created."""
    found: list[TopicPartition] = []
    for topic in topics:
        parts = None
        for _ in range(20):
            parts = reader.partitions_for_topic(topic)
            if parts:
                break
            await reader._client.force_metadata_update()
            await asyncio.sleep(0.1)
        if not parts:
            raise CdcError(f"the topic {topic} does not exist on the broker")
        found += [TopicPartition(topic, p) for p in sorted(parts)]
    return found


async def read_spans(
    settings: KafkaSettings, bootstrap: list[str], spans: dict[str, Span], timeout: float = 60
) -> AsyncIterator[ConsumerRecord[Any, Any]]:
    """The messages of each span's `[lo, end)`, for rebuilding a recorded delta. A span the
    topic no longer holds (retention) is an error naming both."""
    wanted = {k: s for k, s in spans.items() if s.lo < s.end}
    if not wanted:
        return
    reader = consumer(settings, bootstrap)
    await reader.start()
    try:
        await partitions_of(reader, {split_key(k)[0] for k in wanted})
        tps = {k: TopicPartition(*split_key(k)) for k in wanted}
        reader.assign(list(tps.values()))
        first = await reader.beginning_offsets(list(tps.values()))
        for key, span in wanted.items():
            if first[tps[key]] > span.lo:
                raise CdcError(
                    f"{key}: the cut log needs offsets {span.lo}..{span.end - 1}, but the topic "
                    f"now starts at {first[tps[key]]} (retention?)"
                )
            reader.seek(tps[key], span.lo)
        left = set(wanted)
        deadline = time.monotonic() + timeout
        while left:
            if time.monotonic() > deadline:
                raise CdcError(f"the recorded offsets of {sorted(left)} could not be read back")
            found = await reader.getmany(timeout_ms=200, max_records=2000)
            for tp, items in found.items():
                key = partition_key(tp.topic, tp.partition)
                for item in items:
                    if item.offset < wanted[key].end:
                        yield item
                if items and items[-1].offset + 1 >= wanted[key].end:
                    left.discard(key)
                    reader.pause(tp)
    finally:
        await reader.stop()
