"""Chunks in groups (`ChunkIntake`), on its own: admitted one by one, staged together, on
real files, and its outcomes returned (it answers nothing, loads nothing).

Staging is the real `ChunkSpool` on a temporary directory; no service, Faust or Kafka.
The grouped path must decide exactly what the one-chunk-at-a-time path decides; what differs
is how many fsync rounds the disk sees, which a recording subclass of the real staging counts.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from conformance.forges.ocf import SYNC, header, zigzag
from podd_runtime.files import FileWrite, temporary_path
from protocol.body_writer import body_schema
from protocol.chunk_range import ChunkRange
from protocol.codec import decode_delta_in_key, encode_delta_in_key
from protocol.errors import ErrorCode
from protocol.ocf import OcfLimits, decoded_size
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from replica_agent.chunk_spool import ChunkSpool, GroupWrite
from replica_agent.intake import (
    ChunkIntake,
    Completed,
    RawMessage,
    Received,
    Refused,
    StreamsReady,
)
from replica_agent.metrics import AgentMetrics
from replica_agent.tracker import TransferTracker
from replica_store.transfer import StagedTransfer
from tests.agent.kafka_io import chunks_of

MiB = 2**20


class CountingSpool(ChunkSpool):
    """The real spool, counting the group writes and the bodies in each."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.groups: list[int] = []

    def write_group(self, bodies: Sequence[FileWrite], streams: Sequence[FileWrite]) -> GroupWrite:
        self.groups.append(len(bodies))
        return super().write_group(bodies, streams)


class Harness:
    def __init__(self, schema: LogicalSchema, root: Path) -> None:
        self.schema = schema
        self.spool = CountingSpool(root / "staging")
        self.metrics = AgentMetrics()
        self.tracker = TransferTracker({schema.datamart: schema}, {schema.datamart: {}})
        self.intake = ChunkIntake(
            self.tracker, self.spool, self.metrics, incomplete_timeout=600, clock=lambda: 0.0
        )

    async def receive(self, messages: list[RawMessage]) -> Received:
        return await self.intake.receive(messages)

    def messages(self, n: int, *, rows: int = 20, chunk_rows: int = 3) -> list[RawMessage]:
        workload = Workload(self.schema, WorkloadSpec(rows_per_delta=rows, seed=n))
        chunks = chunks_of(self.schema, n, workload.next_delta(), chunk_rows=chunk_rows)
        return [(encode_delta_in_key(c.key), c.body) for c in chunks]


@pytest.fixture
def harness(marketing: LogicalSchema, tmp_path: Path) -> Harness:
    return Harness(marketing, tmp_path)


def metric(harness: Harness, line: str) -> bool:
    return line in harness.metrics.render().decode()


async def test_a_whole_delta_in_one_group_is_staged_in_one_write_and_sealed_once(
    harness: Harness,
) -> None:
    messages = harness.messages(0)
    received = await harness.receive([*messages, *messages[:4]])  # 4 duplicates
    assert received.failures == [None] * (len(messages) + 4)
    (completed,) = received.outcomes  # the one outcome: the transfer, sealed for the loader
    assert isinstance(completed, Completed)
    # One group write for every body (the duplicates write nothing).
    assert harness.spool.groups == [len(messages)]
    loaded = completed.staged
    assert loaded == StagedTransfer.open(loaded.directory)  # the manifest on disk
    assert sum(s.chunk_count for s in loaded.manifest.streams) == len(messages)
    # Each stream's decoded size is what its bodies decompress to, measured in the group.
    by_stream: dict[int, int] = {}
    for raw_key, body in messages:
        number = decode_delta_in_key(raw_key).stream_number
        by_stream[number] = by_stream.get(number, 0) + (
            decoded_size(body, OcfLimits()) if body else 0
        )
    assert {s.stream_number: s.decoded_bytes for s in loaded.manifest.streams} == by_stream
    assert sum(by_stream.values()) > 0
    assert metric(harness, 'podd_chunk_duplicates_total{datamart="marketing"} 4.0')
    assert metric(harness, "podd_staging_writes_total 1.0")


async def test_a_file_that_cannot_be_written_fails_its_message_and_the_disk_stays_the_truth(
    harness: Harness,
) -> None:
    messages = harness.messages(0)
    opened = await harness.receive(messages[:1])  # opens the transfer
    assert (opened.failures, opened.outcomes) == ([None], [])
    (transfer,) = harness.tracker.open.values()
    rid = transfer.request_id
    # Something in the way of the third chunk's body: it cannot be written.
    third = decode_delta_in_key(messages[2][0])
    blocker = temporary_path(harness.spool.chunk_path(rid, third.stream_number, third.chunk_number))
    blocker.mkdir()
    (blocker / "in-the-way").write_text("x")

    group = messages[1:-1]
    received = await harness.receive(group)
    failures = received.failures
    assert received.outcomes == []
    assert isinstance(failures[1], OSError)
    # Besides the blocked chunk, every chunk that changed a stream's file fails: the
    # directory's later files (stream files) are not written once one of its files failed.
    keys = [decode_delta_in_key(k) for k, _ in group]
    changers = {
        i
        for i, k in enumerate(keys)
        if k.is_last_chunk or (k.chunk_number == 1 and k.stream_number != 1)
    }
    failed = {i for i, f in enumerate(failures) if f is not None}
    assert failed == {1} | changers
    assert len(changers) >= 2
    # The tracker was read again from disk: what it holds is what the files hold.
    reread = harness.tracker.open[rid]
    assert third.chunk_number not in reread.streams[third.stream_number].chunks
    on_disk = harness.spool.read_transfer(rid)
    assert {n: s.chunks for n, s in reread.streams.items()} == {
        n: s.chunks for n, s in on_disk.streams.items()
    }

    # Once the way is clear, the origin sends the delta again: it completes and loads.
    (blocker / "in-the-way").unlink()
    blocker.rmdir()
    again = await harness.receive(messages)
    assert again.failures == [None] * len(messages)
    (completed,) = again.outcomes
    assert isinstance(completed, Completed)
    assert completed.transfer is harness.tracker.open[rid]


def bomb_body(schema: LogicalSchema, table: str) -> bytes:
    """A body whose one block inflates past the 64 MiB block bound."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = b"".join(packer.compress(bytes(MiB)) for _ in range(80)) + packer.flush()
    schema_json = body_schema(schema.table(table))
    return header(schema_json, "deflate") + zigzag(10) + zigzag(len(raw)) + raw + SYNC


async def test_a_body_beyond_its_bounds_refuses_its_transfer_within_the_group(
    harness: Harness,
) -> None:
    """Measured side by side in the group: the bomb's transfer is refused BAD_CHUNK, once,
    and finished (its later chunks are dropped); the bomb is never written; the next delta
    then completes."""
    bad = harness.messages(0)
    key = decode_delta_in_key(bad[1][0])
    bombed = (bad[1][0], bomb_body(harness.schema, key.table_name))
    received = await harness.receive([bad[0], bombed, *bad[2:]])
    assert received.failures == [None] * len(bad)
    (refused,) = received.outcomes
    assert isinstance(refused, Refused)
    assert refused.framing.request_id == key.request_id
    assert refused.code is ErrorCode.BAD_CHUNK
    assert "decompresses to more than" in refused.message
    assert harness.tracker.is_finished(key.request_id)
    bomb_file = harness.spool.chunk_path(key.request_id, key.stream_number, key.chunk_number)
    assert not bomb_file.exists()

    good = harness.messages(0)  # delta 0 again, under a new requestId
    again = await harness.receive(good)
    assert again.failures == [None] * len(good)
    (completed,) = again.outcomes
    assert isinstance(completed, Completed)


async def test_a_stream_arriving_is_offered_at_the_eager_size_only_while_nothing_is_prestaged(
    harness: Harness,
) -> None:
    """Pieces of 64 MiB, or of 1 byte while the prestager is idle: busy, the chunks wait
    (no offer); idle, every stream is offered its chunks so far, none with a gap."""
    prestager_idle = False
    harness.intake.prestage_piece_bytes = 64 * MiB
    harness.intake.prestage_eager_bytes = 1
    harness.intake.prestage_idle = lambda: prestager_idle
    early = [m for m in harness.messages(0, rows=90) if not decode_delta_in_key(m[0]).is_last_chunk]
    assert len({decode_delta_in_key(k).stream_number for k, _ in early}) > 1
    half = len(early) // 2
    busy = await harness.receive(early[:half])
    assert busy.failures == [None] * half
    assert not [o for o in busy.outcomes if isinstance(o, StreamsReady)]
    prestager_idle = True
    idle = await harness.receive(early[half:])
    (offered,) = [o for o in idle.outcomes if isinstance(o, StreamsReady)]
    highest: dict[int, int] = {}
    for raw_key, _ in early:
        key = decode_delta_in_key(raw_key)
        highest[key.stream_number] = max(highest.get(key.stream_number, 0), key.chunk_number)
    pieces = {s.stream_number: s for s in offered.staged.manifest.streams}
    assert set(pieces) == set(highest)
    for number, piece in pieces.items():
        assert piece.chunks == ChunkRange(1, highest[number], False)
