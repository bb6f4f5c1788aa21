"""Bodies in each Avro codec the replica reads (null, deflate, snappy, zstandard): the same
rows come out, and a bomb or a corrupt block in the newer two is `BAD_CHUNK` within bounds."""

from __future__ import annotations

import io
import struct
import time
import zlib
from datetime import datetime, timedelta
from typing import Any, cast

import cramjam
import fastavro
import pytest
import zstandard

from conformance.forges.ocf import SYNC, header, zigzag
from protocol.body import decode_body
from protocol.body_writer import body_schema, encode_body
from protocol.errors import BadChunkError
from protocol.ocf import ContainerError, OcfLimits, decoded_size
from protocol.schema import LogicalSchema, Table

MiB = 2**20
CODECS = ["null", "deflate", "snappy", "zstandard"]


@pytest.fixture
def sales(marketing: LogicalSchema) -> Table:
    return marketing.table("sales")


def rows(n: int) -> list[tuple[object, ...]]:
    day = datetime(2024, 1, 1)
    return [
        (i, day + timedelta(seconds=i), f"P{i % 13}", i % 5, 100 + i, None, i % 2) for i in range(n)
    ]


def decoded_ids(table: Table, body: bytes) -> list[int]:
    batches = list(decode_body(table, body))
    return [v for b in batches for v in b.column(0).to_pylist()]


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_reads_back_the_rows_our_writer_wrote(sales: Table, codec: str) -> None:
    body = encode_body(sales, rows(5000), codec=codec)  # type: ignore[arg-type]
    assert decoded_ids(sales, body) == list(range(5000))
    assert decoded_size(body, OcfLimits()) == decoded_size(
        encode_body(sales, rows(5000), codec="null"), OcfLimits()
    )


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_another_reader_reads_the_codecs_every_reader_must(sales: Table, codec: str) -> None:
    """The protocol's two codecs, as our writer packs them (deflate by cramjam, raw RFC
    1951), read by fastavro (zlib inflating) as the same rows."""
    body = encode_body(sales, rows(5000), codec=codec)  # type: ignore[arg-type]
    read = [tuple(cast(dict[str, Any], r).values()) for r in fastavro.reader(io.BytesIO(body))]
    naive = [
        tuple(v.replace(tzinfo=None) if isinstance(v, datetime) else v for v in r) for r in read
    ]
    assert naive == rows(5000)  # fastavro reads timestamp-micros as aware UTC datetimes


def test_snappy_reads_back_what_fastavro_wrote(sales: Table) -> None:
    """Another writer's containers (fastavro's blocks, its snappy checksum) read the same.
    (This fastavro writes zstandard only with `backports.zstd`, which is not installed.)"""
    schema = fastavro.parse_schema(body_schema(sales))
    names = [f["name"] for f in body_schema(sales)["fields"]]
    out = io.BytesIO()
    fastavro.writer(
        out,
        schema,
        (dict(zip(names, r, strict=True)) for r in rows(3000)),
        codec="snappy",
        sync_interval=4096,
    )
    assert decoded_ids(sales, out.getvalue()) == list(range(3000))


def block(table: Table, codec: str, raw: bytes, count: int = 10**6) -> bytes:
    return header(body_schema(table), codec) + zigzag(count) + zigzag(len(raw)) + raw + SYNC


def test_a_zstandard_bomb_is_bad_chunk_without_inflating_it(sales: Table) -> None:
    packer = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    raw = b"".join(packer.compress(bytes(MiB)) for _ in range(2048)) + packer.flush()
    assert len(raw) < MiB  # two gigabytes of zeros on the wire in under a megabyte
    started = time.perf_counter()
    with pytest.raises(BadChunkError, match="decompresses to more than"):
        list(decode_body(sales, block(sales, "zstandard", raw)))
    with pytest.raises(ContainerError, match="decompresses to more than"):
        decoded_size(block(sales, "zstandard", raw), OcfLimits())
    assert time.perf_counter() - started < 10


def test_a_snappy_block_claiming_more_than_the_bound_is_refused_before_inflating(
    sales: Table,
) -> None:
    claim = bytes([0x80, 0x80, 0x80, 0x80, 0x0F])  # a varint of 4 GiB
    raw = claim + b"\x00" * 10 + b"\x00\x00\x00\x00"
    with pytest.raises(BadChunkError, match="decompresses to more than"):
        list(decode_body(sales, block(sales, "snappy", raw)))


def test_a_snappy_block_with_a_wrong_checksum_is_bad_chunk(sales: Table) -> None:
    payload = b"\x00" * 64
    good = bytes(cramjam.snappy.compress_raw(payload))
    wrong = good + struct.pack(">I", zlib.crc32(payload) ^ 1)
    with pytest.raises(BadChunkError, match="CRC32"):
        list(decode_body(sales, block(sales, "snappy", wrong, count=1)))


@pytest.mark.parametrize("codec", ["snappy", "zstandard"])
def test_a_cut_block_is_bad_chunk(sales: Table, codec: str) -> None:
    data = b"x" * 5000
    snappy = bytes(cramjam.snappy.compress_raw(data)) + struct.pack(">I", zlib.crc32(data))
    raw = zstandard.compress(data) if codec == "zstandard" else snappy
    with pytest.raises(BadChunkError):
        list(decode_body(sales, block(sales, codec, raw[: len(raw) // 2], count=1)))
