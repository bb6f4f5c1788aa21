"""How much CPU reading a Qlik topic costs a message: the origin's reader against librdkafka.

    python -m bench.cdc_read [--changes 100000] [--pairs 2] [--batch 8000] [--bootstrap H:P]

The messages of `bench.cdc_bench`'s Qlik topic (one a change) are written to a topic of the
broker given (an embedded Tansu if none), then read from the start, in alternating runs:
- `topic_reader`: the origin's `podd_cdc.topic_reader.TopicReader` (aiokafka's connection,
  each fetch's records read into columns by `podd_kafka.fetch_columns` through the batch
  guard), taking runs of `--batch` records of a partition, as the origin does, and each
  message's value as bytes (the origin's batch read takes them without that:
  `record_columns.values_at`);
- `librdkafka`: `confluent_kafka.Consumer.consume` in batches as large, each message's value
  and offset taken (skipped where `confluent-kafka` is not installed: it is no dependency).

CPU seconds of this process (librdkafka's threads included) over the messages read, wall
seconds beside. Why it exists: issue 46 asks for a native reader; this is the figure it
would save, against what it would cost (docs/cdc/internals.md: librdkafka inflates a gzip
or lz4 batch without a bound, where the batch guard refuses one past its bound).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.cdc_bench import PARTITIONS, source
from podd_cdc.source_consumer import MAX_MESSAGE_BYTES
from podd_cdc.topic_reader import MOST_RECORDS, TopicReader
from podd_kafka.broker import embedded_broker
from podd_kafka.settings import KafkaSettings
from tools.cdc_write.produce import produce


async def read_topic_reader(bootstrap: str, topic: str, total: int, batch: int) -> int:
    """Every message of `topic` through the origin's reader, `batch` records of a partition
    at a time; the messages read."""
    reader = TopicReader(KafkaSettings(broker=bootstrap), [bootstrap], 1.0, batch)
    await reader.start([topic])
    try:
        for key, offset in (await reader.first_offsets(latest=False)).items():
            reader.seek(key, offset)
        read = 0
        while read < total:
            for _, messages in await reader.runs():
                read += sum(value is not None for value in messages.values())
        return read
    finally:
        await reader.stop()


def read_librdkafka(bootstrap: str, topic: str, total: int, batch: int) -> int:
    """Every message of `topic` through librdkafka; the messages read."""
    import confluent_kafka  # noqa: PLC0415 (optional: not a dependency)

    consumer: Any = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.message.max.bytes": MAX_MESSAGE_BYTES,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    try:
        read = 0
        while read < total:
            for message in consumer.consume(batch, 0.5):
                read += message.error() is None and message.value() is not None
        return read
    finally:
        consumer.close()


def readers() -> dict[str, Any]:
    found: dict[str, Any] = {"topic_reader": lambda *args: asyncio.run(read_topic_reader(*args))}
    try:
        import confluent_kafka  # noqa: F401, PLC0415
    except ImportError:
        return found
    found["librdkafka"] = read_librdkafka
    return found


@contextmanager
def _broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    with embedded_broker() as started:
        yield started


def _written_topic(bootstrap: str, changes: int) -> tuple[str, int]:
    """A topic of the bench's Qlik messages for `changes`, and how many: the messages are
    not kept (a heap of them would slow the readers' garbage collection)."""
    written, _ = source("qlik", changes, 0)
    topic = f"bench-cdc-read-{uuid.uuid4().hex[:6]}"
    settings = KafkaSettings(broker=bootstrap)
    asyncio.run(produce(settings, [bootstrap], topic, PARTITIONS, written))
    return topic, len(written)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cdc_read", description=__doc__)
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=MOST_RECORDS, help="records a partition")
    parser.add_argument("--bootstrap", help="a broker's HOST:PORT (default: an embedded Tansu)")
    args = parser.parse_args(argv)
    with _broker(args.bootstrap) as bootstrap:
        topic, total = _written_topic(bootstrap, args.changes)
        for _ in range(args.pairs):
            for name, read in readers().items():
                cpu, wall = time.process_time(), time.monotonic()
                count = read(bootstrap, topic, total, args.batch)
                cpu, wall = time.process_time() - cpu, time.monotonic() - wall
                print(
                    f"{name}: {cpu / count * 1e6:.2f} CPU us a message "
                    f"({count:,} messages, {wall:.2f} s)",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
