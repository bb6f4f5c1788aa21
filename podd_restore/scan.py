"""Read a backup topic once, every partition from its beginning to the end it had when the
scan started: a backup topic is a finished file, not a stream.

No consumer group and no committed offsets: a restore is idempotent through the replica's
registry, so a scan always starts from the beginning (run again after a crash, it reads the
topic again and applies only what the registry lacks). The topic is never created here: a
missing topic is an error, not an empty backup.

Where a partition ends is the larger of the end offset ListOffsets reports and the high
watermark every fetch response carries (on Apache Kafka they agree; the embedded Tansu
reports the number of record batches as the end offset, the fetch's high watermark is right).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition

from podd_kafka.batch_guard import guard_batches
from podd_kafka.client import aiokafka_options, partition_count
from podd_kafka.settings import KafkaSettings
from podd_restore.errors import RestoreError
from podd_restore.plan import Place

#: Called with each message: where it is, its key and its value (either may be None).
OnMessage = Callable[[Place, bytes | None, bytes | None], None]


async def scan_topic(
    settings: KafkaSettings,
    bootstrap: list[str],
    topic: str,
    on_message: OnMessage,
    *,
    stall_timeout: float = 60.0,
) -> int:
    """Every message of `topic` up to its end offsets at the start; returns how many."""
    partitions = await partition_count(settings, bootstrap, topic)
    if partitions is None:
        raise RestoreError(f"topic {topic} does not exist on {','.join(bootstrap)}")
    guard_batches(settings)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
        **aiokafka_options(settings),
    )
    await consumer.start()
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        ends = await consumer.end_offsets(assigned)
        starts = await consumer.beginning_offsets(assigned)
        pending = {tp for tp in assigned if ends[tp] > starts[tp]}
        read = 0
        progressed = time.monotonic()
        while pending:
            batches = await consumer.getmany(*pending, timeout_ms=500, max_records=1000)
            for tp, records in batches.items():
                ends[tp] = max(ends[tp], consumer.highwater(tp) or 0)
                for record in records:
                    if record.offset >= ends[tp]:
                        break
                    on_message(Place(topic, tp.partition, record.offset), record.key, record.value)
                    read += 1
                    progressed = time.monotonic()
            for tp in list(pending):
                ends[tp] = max(ends[tp], consumer.highwater(tp) or 0)
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
                    consumer.pause(tp)
            if pending and time.monotonic() - progressed > stall_timeout:
                left = {tp.partition: ends[tp] for tp in pending}
                raise RestoreError(
                    f"topic {topic}: no message for {stall_timeout:g} s before the end offsets "
                    f"the broker reported (partition: end offset {left})"
                )
        return read
    finally:
        await consumer.stop()
