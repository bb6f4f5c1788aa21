"""Staging on disk: what a restart finds after a crash at any point of a chunk's writes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from protocol.body_writer import encode_body
from protocol.chunk_files import ChunkFile
from protocol.errors import ErrorCode
from protocol.messages import DeltaInResult, DeltaStatus
from protocol.ocf import OcfLimits, decoded_size
from protocol.schema import LogicalSchema
from replica_agent.answers import error_result
from replica_agent.errors import StagingError
from replica_agent.staging import TRANSFER_FILE, TransferStaging
from replica_agent.transfers import StreamState, Transfer
from tests.agent.staging_writes import write_chunk, write_stream

DATE = datetime(2026, 1, 1, tzinfo=UTC)


def transfer(request_id: str = "r/1 with any characters") -> Transfer:
    return Transfer(request_id, "marketing", 0, DATE, "SELECT 1", 2)


def test_an_open_transfer_is_rebuilt_from_its_files(tmp_path: Path) -> None:
    staging = TransferStaging(tmp_path)
    t = transfer()
    staging.open_transfer(t)
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
    staging.open_transfer(t)
    for number in (1, 2):
        write_chunk(staging, t.request_id, number, 1, None)
        write_stream(staging, t.request_id, number, t.streams[number])
    sealed = staging.seal(t)
    assert sealed.chunks_of("stores") == [
        (1, staging.directory(t.request_id) / ChunkFile(2, 1).name)
    ]
    assert staging.sealed(t.request_id) == sealed


def test_owed_answers_survive_and_settled_ones_finish_the_transfer(tmp_path: Path) -> None:
    staging = TransferStaging(tmp_path)
    owed, settled = transfer("owed"), transfer("settled")
    for t in (owed, settled):
        staging.open_transfer(t)
        result = DeltaInResult(
            request_id=t.request_id, datamart="marketing", delta_num=0, delta_date=DATE,
            status=DeltaStatus.ERROR, error_code="BAD_CHUNK", error_message="x",
        )  # fmt: skip
        staging.owe(result)
    staging.settle("settled")
    found = TransferStaging(tmp_path).recover()
    assert [r.request_id for r in found.owed] == ["owed"]
    assert set(found.finished) == {"owed", "settled"}
    assert found.open == []  # the owed transfer's files are cleaned up too
    assert list(staging.transfers.iterdir()) == []


def test_a_directory_without_its_framing_is_a_crash_leftover(tmp_path: Path) -> None:
    staging = TransferStaging(tmp_path)
    (staging.transfers / "half").mkdir()
    assert staging.recover().open == []
    assert not (staging.transfers / "half").exists()


def test_an_unreadable_framing_file_is_quarantined_not_a_crash_loop(tmp_path: Path) -> None:
    staging = TransferStaging(tmp_path / "staging")
    t = transfer()
    staging.open_transfer(t)
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


def test_an_unreadable_answer_is_quarantined(tmp_path: Path) -> None:
    staging = TransferStaging(tmp_path / "staging")
    (staging.outbox / "x.owed.json").write_text("not json")
    found = staging.recover()
    assert found.owed == []
    assert [w.parent for w, _ in found.quarantined] == [tmp_path / "quarantine"]


def test_an_answer_is_recorded_once(tmp_path: Path) -> None:
    staging = TransferStaging(tmp_path)
    t = transfer()
    first = error_result(t, ErrorCode.BAD_CHUNK, "first")
    second = error_result(t, ErrorCode.LOAD_FAILED, "second")
    assert staging.owe(first) == first
    assert staging.owe(second) == first  # never a second, different answer
    staging.settle(t.request_id)
    assert staging.owe(second) == first  # also after it was sent


def test_sent_answers_beyond_the_budget_are_pruned_as_they_settle(tmp_path: Path) -> None:
    staging = TransferStaging(tmp_path, keep_finished=3)
    for n in range(6):
        rid = f"r{n}"
        staging.owe(error_result(transfer(rid), ErrorCode.BAD_CHUNK, "x"))
        staging.settle(rid)
    assert len(list(staging.outbox.glob("*.sent.json"))) == 3


def test_a_sealed_manifest_records_what_the_bodies_decompress_to(
    tmp_path: Path, marketing: LogicalSchema
) -> None:
    sales = marketing.table("sales")
    rows = [(i, 0, "P" * 60, 1, 1, None, 0) for i in range(300)]
    body = encode_body(sales, rows, codec="deflate")
    staging = TransferStaging(tmp_path)
    t = Transfer("r", "marketing", 0, DATE, "SELECT 1", 1)
    staging.open_transfer(t)
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
