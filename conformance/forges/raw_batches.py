"""Kafka record batches built by hand, broken on purpose, and produced as they are.

A client library never writes a batch whose codec bits lie, whose compressed bytes are
garbage or whose CRC is wrong; a broken or hostile producer can. These build such batches
(format v2) and send them with a plain ProduceRequest, so a consumer's handling of them
(`podd_kafka.batch_guard`) is tested on a real broker.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence

import cramjam
import zstandard
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import TopicPartition

CODEC_BITS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_CRC_AT, _ATTRIBUTES_AT, _RECORDS_AT = 17, 21, 61


def record_batch(records: Sequence[tuple[bytes | None, bytes | None]]) -> bytes:
    """An uncompressed v2 batch of (key, value) records (offsets from 0; the broker
    assigns the real ones)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=64 * 2**20,
    )
    now = int(time.time() * 1000)
    for offset, (key, value) in enumerate(records):
        builder.append(offset, timestamp=now, key=key, value=value, headers=[])
    return bytes(builder.build())


def with_payload(batch: bytes, codec: str | int, payload: bytes) -> bytes:
    """`batch` with its records replaced by `payload` and its codec bits set to `codec`
    (a name, or any number 0-7), its length and CRC made right again."""
    bits = CODEC_BITS[codec] if isinstance(codec, str) else codec
    head = bytearray(batch[:_RECORDS_AT])
    (attributes,) = struct.unpack_from(">h", head, _ATTRIBUTES_AT)
    struct.pack_into(">h", head, _ATTRIBUTES_AT, (attributes & ~0x07) | bits)
    struct.pack_into(">i", head, 8, len(head) + len(payload) - 12)
    out = bytes(head) + payload
    crc = calc_crc32c(out[_ATTRIBUTES_AT:])
    return out[:_CRC_AT] + struct.pack(">I", crc) + out[_CRC_AT + 4 :]


def records_of(batch: bytes) -> bytes:
    return batch[_RECORDS_AT:]


def compressed(batch: bytes, codec: str) -> bytes:
    """`batch` compressed as a client would (a valid batch in `codec`)."""
    records = records_of(batch)
    if codec == "zstd":
        payload = zstandard.compress(records)
    elif codec == "snappy":
        payload = bytes(cramjam.snappy.compress_raw(records))
    elif codec == "lz4":
        payload = bytes(cramjam.lz4.compress(records))
    else:
        payload = bytes(cramjam.gzip.compress(records))
    return with_payload(batch, codec, payload)


def zstd_bomb(batch: bytes, size: int) -> bytes:
    """`batch` whose zstd payload inflates to `size` zero bytes (no frame content size)."""
    packer = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    piece = bytes(2**20)
    payload = b"".join(packer.compress(piece) for _ in range(size // len(piece)))
    return with_payload(batch, "zstd", payload + packer.flush())


def bad_crc(batch: bytes) -> bytes:
    (crc,) = struct.unpack_from(">I", batch, _CRC_AT)
    return batch[:_CRC_AT] + struct.pack(">I", crc ^ 0xFFFF) + batch[_CRC_AT + 4 :]


async def send_raw(
    bootstrap: list[str], topic: str, partition: int, batch: bytes, **options: object
) -> None:
    """Produce `batch` as it is to `topic`'s `partition` (acks=all); raises on an error."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, **options)
    await client.bootstrap()
    try:
        await client.force_metadata_update()
        leader = client.cluster.leader_for_partition(TopicPartition(topic, partition))
        if leader is None or leader < 0:
            raise RuntimeError(f"no leader for {topic}/{partition}")
        request = ProduceRequest(
            required_acks=-1,
            timeout=10_000,
            topics=[(topic, [(partition, batch)])],
            transactional_id=None,
        )
        response = await client.send(leader, request)
        for _, partitions in response.topics:
            for answer in partitions:
                if answer[1] != 0:
                    raise RuntimeError(f"the broker refused the batch: error {answer[1]}")
    finally:
        await client.close()
