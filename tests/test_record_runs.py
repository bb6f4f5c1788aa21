"""Records taken a record batch at a time (`podd_kafka.record_runs`) on the real broker: the
same records, with the same fields, as aiokafka's own consumer gives, from a fetch offset
inside a compressed batch; the batches' lists, of a bounded length, are what `max_records`
counts."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from conformance.forges import raw_batches as rb
from podd_kafka.batch_guard import BatchGuard, install
from podd_kafka.client import ensure_topics
from podd_kafka.record_runs import MOST_IN_A_LIST, RecordRun
from podd_kafka.settings import KafkaSettings
from tests.batched_io import read_partition, send_together

PER_PARTITION = 60


def _messages() -> list[dict[str, Any]]:
    """Two partitions' messages: null keys, empty values, headers on some."""
    return [
        {
            "value": f"value-{p}-{n}".encode() * (n % 3),  # every third value empty
            "key": None if n % 4 == 0 else f"key-{n}".encode(),
            "partition": p,
            "headers": [("h", f"{n}".encode())] if n % 2 else [],
        }
        for p in range(2)
        for n in range(PER_PARTITION)
    ]


def test_record_runs_give_aiokafkas_records_from_inside_a_batch(broker: str) -> None:
    install(BatchGuard())
    topic = f"runs-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[list[Any], list[Any], int]:
        await send_together(broker, topic, _messages(), compression="gzip")
        plain, _ = await read_partition(broker, topic, 7, PER_PARTITION - 7)
        taken, items = await read_partition(broker, topic, 7, PER_PARTITION - 7, runs=True)
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


def test_a_record_batch_of_many_records_comes_in_bounded_lists(broker: str) -> None:
    """A batch of more records than a list holds: several lists, every record once, in
    order, from the start or from inside the batch (a hostile batch of many small records
    never has them all made at once)."""
    install(BatchGuard())
    topic = f"runs-many-{uuid.uuid4().hex[:8]}"
    count = 2 * MOST_IN_A_LIST + 500
    settings = KafkaSettings(topic_delta_in=topic, delta_in_partitions=1)
    bootstrap = settings.bootstrap_servers(broker)

    async def scenario() -> tuple[list[Any], int, list[Any], int]:
        await ensure_topics(settings, bootstrap)
        records = [(f"{n}".encode(), b"v") for n in range(count)]
        await rb.send_raw(bootstrap, topic, 0, rb.compressed(rb.record_batch(records), "lz4"))
        whole, lists = await read_partition(bootstrap, topic, 0, count, runs=True)
        inside, lists_inside = await read_partition(
            bootstrap, topic, MOST_IN_A_LIST + 100, count - MOST_IN_A_LIST - 100, runs=True
        )
        return whole, lists, inside, lists_inside

    whole, lists, inside, lists_inside = asyncio.run(scenario())
    assert [r.key for r in whole] == [f"{n}".encode() for n in range(count)]
    assert [r.offset for r in whole] == list(range(count))
    assert lists == 3
    assert [r.offset for r in inside] == list(range(MOST_IN_A_LIST + 100, count))
    assert lists_inside == 2
