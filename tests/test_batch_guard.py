"""Kafka batches a consumer cannot read are skipped with their offsets named, never fatal.

Batches built by hand (`conformance.forges.raw_batches`) go to a real broker: valid ones in every
Kafka codec, and broken ones (garbage under a codec's bits, a codec number that is none, a
wrong CRC, a zstd bomb). A plain aiokafka consumer with the guard installed reads every
valid record once, in order, and hears of each broken batch by its offsets; so does one
taking its records a batch at a time (`podd_kafka.record_runs`)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from aiokafka.consumer import fetcher
from aiokafka.record.default_records import DefaultRecordBatch

from conformance.forges import raw_batches as rb
from podd_kafka import batch_guard
from podd_kafka.batch_guard import BatchGuard, PoisonBatch
from podd_kafka.client import ensure_topics
from podd_kafka.settings import KafkaSettings
from tests.batched_io import read_partition

MiB = 2**20


@pytest.fixture
def guard() -> Iterator[list[PoisonBatch]]:
    before = (fetcher.MemoryRecords, fetcher.PartitionRecords)
    seen: list[PoisonBatch] = []
    batch_guard.install(BatchGuard(max_decoded_bytes=64 * MiB, on_poison=seen.append))
    yield seen
    fetcher.MemoryRecords, fetcher.PartitionRecords = before


def batch(tag: str, n: int = 3) -> bytes:
    return rb.record_batch(
        [(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode() * 20) for i in range(n)]
    )


@pytest.mark.parametrize("runs", [False, True], ids=["records", "record-runs"])
async def test_every_codec_reads_and_every_broken_batch_is_skipped_by_its_offsets(
    broker: str, guard: list[PoisonBatch], runs: bool
) -> None:
    topic = f"guard-{uuid.uuid4().hex[:8]}"
    settings = KafkaSettings(topic_delta_in=topic, delta_in_partitions=1)
    bootstrap = settings.bootstrap_servers(broker)
    await ensure_topics(settings, bootstrap)
    sent = [
        rb.compressed(batch("gzip"), "gzip"),  # offsets 0-2
        rb.with_payload(batch("junk"), "snappy", os.urandom(200)),  # 3-5
        rb.compressed(batch("snappy"), "snappy"),  # 6-8
        rb.compressed(batch("lz4"), "lz4"),  # 9-11
        rb.bad_crc(batch("crc")),  # 12-14
        rb.compressed(batch("zstd"), "zstd"),  # 15-17
        rb.zstd_bomb(batch("bomb"), 1024 * MiB),  # 18-20
        batch("plain"),  # 21-23
        # 24-26, its CRC right: the last record's header count -1, after two good records
        rb.with_payload(batch("broken"), "none", rb.records_of(batch("broken"))[:-1] + b"\x01"),
        batch("after"),  # 27-29
    ]
    for raw in sent:
        await rb.send_raw(bootstrap, topic, 0, raw)

    records, _ = await read_partition(bootstrap, topic, 0, 20, runs)
    keys = [r.key for r in records]

    good = ["gzip", "snappy", "lz4", "zstd", "plain"]
    expected = [f"{tag}-k{i}".encode() for tag in good for i in range(3)]
    expected += [b"broken-k0", b"broken-k1", b"after-k0", b"after-k1", b"after-k2"]
    assert keys == expected
    assert [(p.topic, p.partition, p.first_offset, p.last_offset) for p in guard] == [
        (topic, 0, first, first + 2) for first in (3, 12, 18, 24)
    ]
    reasons = [p.reason for p in guard]
    assert "snappy" in reasons[0]
    assert "CRC" in reasons[1]
    assert "more than" in reasons[2]
    assert "header" in reasons[3]


def test_a_codec_number_that_is_no_codec_is_refused_before_reading() -> None:
    """(Tansu itself refuses to store such a batch, so this one is checked offline.)"""
    guard = BatchGuard()
    plain = batch("x")
    assert guard.problem(plain) is None
    assert guard.problem(rb.compressed(plain, "lz4")) is None
    assert "codec 6" in str(guard.problem(rb.with_payload(plain, 6, rb.records_of(plain))))
    small = BatchGuard(max_decoded_bytes=100)
    assert "more than 100" in str(small.problem(rb.compressed(batch("y", 50), "snappy")))
    # LZ4's bound is its block count times its block size (4 MiB here): within a block
    big = rb.record_batch([(b"k", bytes(MiB)) for _ in range(12)])
    assert "more than" in str(BatchGuard(max_decoded_bytes=MiB).problem(rb.compressed(big, "lz4")))
    assert BatchGuard(max_decoded_bytes=13 * MiB).problem(rb.compressed(big, "lz4")) is None


def test_install_refuses_an_aiokafka_without_the_fetcher_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch_guard, "_ORIGINAL_RECORDS", None)
    with pytest.raises(RuntimeError, match="MemoryRecords"):
        batch_guard.install(BatchGuard())


def test_the_crc_is_judged_as_aiokafka_judges_it_on_every_byte_changed() -> None:
    """`crc_matches` (the CPU's CRC-32C) against aiokafka's own, offline: valid batches in
    every codec, and each byte of one batch changed (the CRC field's included), and a batch
    cut short, which it leaves to aiokafka."""
    whole = [batch("plain", 5), *(rb.compressed(batch(c), c) for c in ("gzip", "lz4", "zstd"))]
    for raw in whole:
        assert batch_guard.crc_matches(raw, DefaultRecordBatch(raw))
    raw = whole[0]
    changed = [raw[:k] + bytes([raw[k] ^ 0x10]) + raw[k + 1 :] for k in range(17, len(raw))]
    judged = [batch_guard.crc_matches(b, DefaultRecordBatch(b)) for b in changed]
    assert judged == [DefaultRecordBatch(b).validate_crc() for b in changed]
    assert not any(judged)
    short = raw[:-1]
    assert batch_guard.crc_matches(short, DefaultRecordBatch(short)) is bool(
        DefaultRecordBatch(short).validate_crc()
    )
