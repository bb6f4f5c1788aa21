"""Staging on disk: what a restart finds after a crash at any point of a chunk's writes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from podd_runtime.files import fsync_directory
from protocol.body_writer import encode_body
from protocol.chunk_files import ChunkFile
from protocol.ocf import OcfLimits, decoded_size
from protocol.schema import LogicalSchema
from replica_agent.chunk_spool import TRANSFER_FILE, ChunkSpool
from replica_agent.errors import SpoolError
from replica_agent.transfers import StreamState, Transfer
from replica_store.transfer import StagedTransfer
from tests.agent.spool_writes import transfer_of, write_chunk, write_stream

DATE = datetime(2026, 1, 1, tzinfo=UTC)


def transfer(request_id: str = "r/1 with any characters") -> Transfer:
    return transfer_of(request_id, "marketing", 0, DATE, "SELECT 1", 2)


def test_an_open_transfer_is_rebuilt_from_its_files(tmp_path: Path) -> None:
    spool = ChunkSpool(tmp_path)
    t = transfer()
    spool.open_transfer(t.framing)
    write_chunk(spool, t.request_id, 1, 1, b"a")
    write_chunk(spool, t.request_id, 1, 2, b"b")
    write_stream(spool, t.request_id, 1, StreamState("sales", {1, 2}, last=2))
    # A crash between a body and its stream's file: the body is ignored.
    write_chunk(spool, t.request_id, 2, 1, b"c")
    (found,) = ChunkSpool(tmp_path).recover().open
    assert (found.request_id, found.delta_date, found.stream_total) == (t.request_id, DATE, 2)
    assert found.streams == {1: StreamState("sales", {1, 2}, 2)}
    assert found.missing() == ["stream 2 last chunk"]


def test_a_complete_transfer_seals_into_the_loader_hand_over(tmp_path: Path) -> None:
    spool = ChunkSpool(tmp_path)
    t = transfer()
    t.streams = {1: StreamState("sales", {1}, 1), 2: StreamState("stores", {1}, 1)}
    spool.open_transfer(t.framing)
    for number in (1, 2):
        write_chunk(spool, t.request_id, number, 1, None)
        write_stream(spool, t.request_id, number, t.streams[number])
    sealed = spool.seal(t)
    assert sealed.chunks_of("stores") == [(1, spool.directory(t.request_id) / ChunkFile(2, 1).name)]
    assert StagedTransfer.open(spool.directory(t.request_id)) == sealed


def test_a_directory_without_its_framing_is_a_crash_leftover(tmp_path: Path) -> None:
    spool = ChunkSpool(tmp_path)
    (spool.transfers / "half").mkdir()
    assert spool.recover().open == []
    assert not (spool.transfers / "half").exists()


def test_an_unreadable_framing_file_is_quarantined_not_a_crash_loop(tmp_path: Path) -> None:
    spool = ChunkSpool(tmp_path / "staging")
    t = transfer()
    spool.open_transfer(t.framing)
    (spool.directory(t.request_id) / TRANSFER_FILE).write_text("{")
    with pytest.raises(SpoolError, match="not a readable staged transfer"):
        spool.read_transfer(t.request_id)
    found = spool.recover()
    assert found.open == []
    ((where, why),) = found.quarantined
    assert where.parent == tmp_path / "quarantine"
    assert "not a readable staged transfer" in why
    assert (where / TRANSFER_FILE).read_text() == "{"  # kept for a person to look at
    assert not spool.directory(t.request_id).exists()
    assert spool.recover().quarantined == []  # the next start is clean


def test_a_sealed_manifest_records_what_the_bodies_decompress_to(
    tmp_path: Path, marketing: LogicalSchema
) -> None:
    sales = marketing.table("sales")
    rows = [(i, 0, "P" * 60, 1, 1, None, 0) for i in range(300)]
    body = encode_body(sales, rows, codec="deflate")
    spool = ChunkSpool(tmp_path)
    t = transfer_of("r", "marketing", 0, DATE, "SELECT 1", 1)
    spool.open_transfer(t.framing)
    write_chunk(spool, "r", 1, 1, body)
    write_chunk(spool, "r", 1, 2, b"")  # an empty chunk: nothing to decode
    write_stream(spool, "r", 1, StreamState("sales", {1, 2}, last=2))
    (recovered,) = spool.recover().open  # decoded sizes unknown after a restart
    assert recovered.streams[1].decoded_bytes is None
    sealed = spool.seal(recovered)
    (stream,) = sealed.manifest.streams
    assert stream.decoded_bytes == decoded_size(body, OcfLimits()) > 3 * len(body)
    sizes = [size for _, _, size in sealed.sized_chunks("sales")]
    assert sum(sizes) == stream.decoded_bytes  # the loader plans slices from these


def test_a_new_transfers_directory_entry_is_made_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transfer's directory is fsynced into `transfers/` before its framing is written:
    else a crash could keep the framing's data but lose the directory that names it."""
    synced: list[Path] = []

    def recording(directory: Path) -> None:
        synced.append(directory)
        fsync_directory(directory)

    monkeypatch.setattr("replica_agent.chunk_spool.fsync_directory", recording)
    spool = ChunkSpool(tmp_path)
    t = transfer()
    spool.open_transfer(t.framing)
    assert synced == [spool.transfers]
