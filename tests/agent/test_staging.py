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
from replica_agent.errors import StagingError
from replica_agent.staging import TRANSFER_FILE, TransferStaging
from replica_agent.transfers import StreamState, Transfer
from replica_store.transfer import StagedTransfer
from tests.agent.staging_writes import transfer_of, write_chunk, write_stream

DATE = datetime(2026, 1, 1, tzinfo=UTC)


def transfer(request_id: str = "r/1 with any characters") -> Transfer:
    return transfer_of(request_id, "marketing", 0, DATE, "SELECT 1", 2)


def test_an_open_transfer_is_rebuilt_from_its_files(tmp_path: Path) -> None:
    staging = TransferStaging(tmp_path)
    t = transfer()
    staging.open_transfer(t.framing)
    write_chunk(staging, t.request_id, 1, 1, b"a")
    write_chunk(staging, t.request_id, 1, 2, b"b")
    write_stream(staging, t.request_id, 1, StreamState("sales", {1, 2}, last=2))
    # A crash between a body and its stream's file: the body is ignored.
    write_chunk(staging, t.request_id, 2, 1, b"c")
    (found,) = TransferStaging(tmp_path).recover().open
    assert (found.request_id, found.delta_date, found.stream_total) == (t.request_id, DATE, 2)
    assert found.streams == {1: StreamState("sales", {1, 2}, 2)}
    assert found.missing() == ["stream 2 last chunk"]


def test_a_complete_transfer_seals_into_the_loader_hand_over(tmp_path: Path) -> None:
    staging = TransferStaging(tmp_path)
    t = transfer()
    t.streams = {1: StreamState("sales", {1}, 1), 2: StreamState("stores", {1}, 1)}
    staging.open_transfer(t.framing)
    for number in (1, 2):
        write_chunk(staging, t.request_id, number, 1, None)
        write_stream(staging, t.request_id, number, t.streams[number])
    sealed = staging.seal(t)
    assert sealed.chunks_of("stores") == [
        (1, staging.directory(t.request_id) / ChunkFile(2, 1).name)
    ]
    assert StagedTransfer.open(staging.directory(t.request_id)) == sealed


def test_a_directory_without_its_framing_is_a_crash_leftover(tmp_path: Path) -> None:
    staging = TransferStaging(tmp_path)
    (staging.transfers / "half").mkdir()
    assert staging.recover().open == []
    assert not (staging.transfers / "half").exists()


def test_an_unreadable_framing_file_is_quarantined_not_a_crash_loop(tmp_path: Path) -> None:
    staging = TransferStaging(tmp_path / "staging")
    t = transfer()
    staging.open_transfer(t.framing)
    (staging.directory(t.request_id) / TRANSFER_FILE).write_text("{")
    with pytest.raises(StagingError, match="not a readable staged transfer"):
        staging.read_transfer(t.request_id)
    found = staging.recover()
    assert found.open == []
    ((where, why),) = found.quarantined
    assert where.parent == tmp_path / "quarantine"
    assert "not a readable staged transfer" in why
    assert (where / TRANSFER_FILE).read_text() == "{"  # kept for a person to look at
    assert not staging.directory(t.request_id).exists()
    assert staging.recover().quarantined == []  # the next start is clean


def test_a_sealed_manifest_records_what_the_bodies_decompress_to(
    tmp_path: Path, marketing: LogicalSchema
) -> None:
    sales = marketing.table("sales")
    rows = [(i, 0, "P" * 60, 1, 1, None, 0) for i in range(300)]
    body = encode_body(sales, rows, codec="deflate")
    staging = TransferStaging(tmp_path)
    t = transfer_of("r", "marketing", 0, DATE, "SELECT 1", 1)
    staging.open_transfer(t.framing)
    write_chunk(staging, "r", 1, 1, body)
    write_chunk(staging, "r", 1, 2, b"")  # an empty chunk: nothing to decode
    write_stream(staging, "r", 1, StreamState("sales", {1, 2}, last=2))
    (recovered,) = staging.recover().open  # decoded sizes unknown after a restart
    assert recovered.streams[1].decoded_bytes is None
    sealed = staging.seal(recovered)
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

    monkeypatch.setattr("replica_agent.staging.fsync_directory", recording)
    staging = TransferStaging(tmp_path)
    t = transfer()
    staging.open_transfer(t.framing)
    assert synced == [staging.transfers]
