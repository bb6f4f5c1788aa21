"""Containers that would exhaust memory or CPU are refused within bounds, bodies and keys."""

from __future__ import annotations

import bz2
import contextlib
import resource
import time
import tracemalloc
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.forges.ocf import SYNC, container, header, zigzag
from protocol.avro_schemas import schema_json
from protocol.body import decode_body
from protocol.body_writer import body_schema, encode_body
from protocol.codec import MAX_MESSAGE_BYTES, Codec, decode_delta_in_key
from protocol.errors import BadChunkError, MessageDecodeError
from protocol.ocf import (
    ContainerError,
    OcfLimits,
    decoded_size,
    iter_blocks,
    read_header,
)
from protocol.schema import LogicalSchema, Table

MiB = 2**20


@pytest.fixture
def sales(marketing: LogicalSchema) -> Table:
    return marketing.table("sales")


def deflate_bomb(size: int) -> bytes:
    """A raw deflate stream of `size` zero bytes (about a thousandth of that on the wire)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    zeros = bytes(MiB)
    parts = [packer.compress(zeros) for _ in range(size // MiB)]
    return b"".join(parts) + packer.flush()


def with_raw_block(schema: object, count: int, raw: bytes, codec: str) -> bytes:
    return header(schema, codec) + zigzag(count) + zigzag(len(raw)) + raw + SYNC


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_body_bomb_is_bad_chunk_without_inflating_it(sales: Table) -> None:
    bomb = with_raw_block(body_schema(sales), 10**6, deflate_bomb(512 * MiB), "deflate")
    assert len(bomb) < 2 * MiB
    before, started = peak_rss_mib(), time.perf_counter()
    with pytest.raises(BadChunkError, match="decompresses to more than"):
        list(decode_body(sales, bomb))
    # At most one block's bound (64 MiB) was inflated, never the half gigabyte.
    assert peak_rss_mib() - before < 200
    assert time.perf_counter() - started < 30


def test_the_block_and_chunk_bounds_are_settings(sales: Table) -> None:
    rows = [(i, 0, "P" * 50, 1, 1, None, 0) for i in range(2000)]
    body = encode_body(sales, rows, codec="deflate")
    size = decoded_size(body, OcfLimits())
    assert size > 100_000
    assert sum(b.num_rows for b in decode_body(sales, body, limits=OcfLimits())) == 2000
    small = OcfLimits(max_block_bytes=1000, max_total_bytes=size)
    with pytest.raises(BadChunkError, match="more than"):
        list(decode_body(sales, encode_body(sales, rows, codec="null"), limits=small))
    blocks = OcfLimits(max_total_bytes=size - 1)
    with pytest.raises(BadChunkError, match="more than"):
        list(decode_body(sales, body, limits=blocks))


@pytest.mark.parametrize("codec", ["bzip2", "xz", "brotli", "lz4"])
def test_codecs_outside_the_avro_four_are_refused(sales: Table, codec: str) -> None:
    data = container(body_schema(sales), [(0, b"")], codec=codec)
    with pytest.raises(BadChunkError, match="not accepted"):
        list(decode_body(sales, data))


def test_an_oversize_header_is_refused() -> None:
    schema = {"type": "record", "name": "r", "doc": "x" * 300_000, "fields": []}
    with pytest.raises(ContainerError, match="does not fit the header"):
        read_header(header(schema), OcfLimits())


def test_a_key_bomb_and_a_foreign_codec_are_undecodable_keys() -> None:
    schema = schema_json("DeltaInKey")
    bomb = with_raw_block(schema, 1, deflate_bomb(32 * MiB), "deflate")
    assert len(bomb) < MAX_MESSAGE_BYTES
    with pytest.raises(MessageDecodeError, match="decompresses to more than"):
        decode_delta_in_key(bomb)
    packed = bz2.compress(b"\x00" * 100)
    with pytest.raises(MessageDecodeError, match="not accepted"):
        decode_delta_in_key(with_raw_block(schema, 1, packed, "bzip2"))
    with pytest.raises(MessageDecodeError, match="more than"):
        decode_delta_in_key(b"Obj\x01" + bytes(MAX_MESSAGE_BYTES))


def test_a_key_with_two_records_or_none_is_undecodable() -> None:
    schema = schema_json("DeltaInKey")
    with pytest.raises(MessageDecodeError, match="holds 0 records"):
        decode_delta_in_key(container(schema, [(0, b"")]))
    with pytest.raises(MessageDecodeError, match="holds 2 records"):
        decode_delta_in_key(container(schema, [(1, b""), (1, b"")]))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.sampled_from(["null", "deflate", "snappy", "zstandard"]))
def test_random_block_bytes_never_escape_as_other_errors(raw: bytes, codec: str) -> None:
    data = with_raw_block({"type": "record", "name": "r", "fields": []}, 3, raw, codec)
    with contextlib.suppress(ContainerError):
        list(iter_blocks(data, read_header(data, OcfLimits()), OcfLimits()))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_headers_never_escape_as_other_errors(tail: bytes) -> None:
    with contextlib.suppress(ContainerError):
        read_header(b"Obj\x01" + tail, OcfLimits())


def test_decoded_size_holds_a_piece_of_a_block_not_the_block(sales: Table) -> None:
    """Staging measures bodies side by side: each measure holds about one MiB, not the
    block it measures (up to 64 MiB), so memory does not grow with how many run at once."""
    body = with_raw_block(body_schema(sales), 10**6, deflate_bomb(48 * MiB), "deflate")
    tracemalloc.start()
    try:
        size = decoded_size(body, OcfLimits())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert size == 48 * MiB
    assert peak < 4 * MiB, f"measuring held {peak / MiB:.1f} MiB"


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(min_value=0, max_value=3000),
    codec=st.sampled_from(["null", "deflate"]),
    cut=st.one_of(st.none(), st.integers(min_value=1, max_value=400)),
)
def test_decoded_size_agrees_with_the_blocks_it_measures(
    marketing: LogicalSchema, rows: int, codec: Codec, cut: int | None
) -> None:
    """Same size as the blocks `iter_blocks` inflates, and the same error where they fail
    (a container cut short anywhere)."""
    table = marketing.table("sales")
    body = encode_body(
        table, [(i, 0, "P" * (i % 70), 1, 1, None, 0) for i in range(rows)], codec=codec
    )
    if cut is not None:
        body = body[: max(len(body) - cut, 0)]
    limits = OcfLimits()

    def outcome(measure: object) -> object:
        try:
            return measure()  # type: ignore[operator]
        except ContainerError as exc:
            return str(exc)

    expected = outcome(
        lambda: sum(len(b.payload) for b in iter_blocks(body, read_header(body, limits), limits))
    )
    assert outcome(lambda: decoded_size(body, limits)) == expected
