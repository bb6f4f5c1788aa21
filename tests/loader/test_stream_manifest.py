"""The staged transfer's stream manifest: its on-disk fields read as one `ChunkRange`."""

from __future__ import annotations

from protocol.chunk_range import ChunkRange
from replica_store.transfer import StreamManifest


def test_the_manifest_keeps_its_on_disk_fields_and_reads_them_as_a_range() -> None:
    chunks = ChunkRange(2, 7, False)
    stream = StreamManifest.of(1, "sales", chunks, 10)
    assert (stream.first_chunk, stream.chunk_count, stream.partial) == (2, 7, True)
    assert stream.chunks == chunks
    assert not stream.whole
    assert StreamManifest(stream_number=1, table_name="t", chunk_count=4).chunks.is_whole
