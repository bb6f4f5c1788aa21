"""Hand-overs to prestaging waiting together are staged together (pure logic): streams of
one transfer that completed while a prestage ran make one prestage, not one each."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from protocol.chunk_range import ChunkRange
from replica_agent.prestage_queue import PrestageQueue
from replica_agent.transfers import Transfer, TransferFraming
from replica_store.transfer import StagedTransfer, StreamManifest, TransferManifest

MERGE_MAX_BYTES = 4 * 2**20


class Merging:
    """A prestager as `PrestageQueue._take` sees it: only its merge bound."""

    merge_max_bytes = MERGE_MAX_BYTES

    def prestage(self, transfer: object, opened: object) -> tuple[list[str], None]:
        raise AssertionError("nothing is prestaged here")


def transfer(request_id: str) -> Transfer:
    return Transfer(
        TransferFraming(
            request_id=request_id,
            datamart="dm",
            delta_num=3,
            delta_date=datetime(2026, 1, 1, tzinfo=UTC),
            subscription="s",
            stream_total=9,
        )
    )


def streams(request_id: str, *numbers: int, decoded: int | None = None) -> StagedTransfer:
    manifest = TransferManifest(
        datamart="dm",
        delta_num=3,
        delta_date=datetime(2026, 1, 1, tzinfo=UTC),
        request_id=request_id,
        streams=tuple(
            StreamManifest(
                stream_number=n, table_name=f"t{n}", chunk_count=1, decoded_bytes=decoded
            )
            for n in numbers
        ),
    )
    return StagedTransfer(Path("/nowhere") / request_id, manifest)


def test_the_streams_of_one_transfer_waiting_together_make_one_prestage() -> None:
    queue = PrestageQueue(cast(Any, None), cast(Any, Merging()), lambda: True)
    first, other = transfer("a"), transfer("b")
    queue._pending = [
        (first, streams("a", 2)),
        (other, streams("b", 1)),
        (first, streams("a", 1, 4)),
    ]
    taken, staged = queue._take()
    assert taken is first
    assert [s.stream_number for s in staged.manifest.streams] == [1, 2, 4]
    assert staged.directory == Path("/nowhere/a")
    assert [(t, s.manifest.request_id) for t, s in queue._pending] == [(other, "b")]
    taken, staged = queue._take()
    assert taken is other
    assert [s.stream_number for s in staged.manifest.streams] == [1]


def test_streams_are_merged_only_up_to_the_bound_so_the_load_never_waits_for_a_big_prestage() -> (
    None
):
    queue = PrestageQueue(cast(Any, None), cast(Any, Merging()), lambda: True)
    first = transfer("a")
    half = MERGE_MAX_BYTES // 2
    queue._pending = [
        (first, streams("a", 1, decoded=half)),
        (first, streams("a", 2, decoded=half + 1)),
        (first, streams("a", 3, decoded=half)),
        (first, streams("a", 4, decoded=half)),
    ]
    _, staged = queue._take()
    assert [s.stream_number for s in staged.manifest.streams] == [1, 3]
    _, staged = queue._take()
    assert [s.stream_number for s in staged.manifest.streams] == [2]
    _, staged = queue._take()
    assert [s.stream_number for s in staged.manifest.streams] == [4]


def piece(first: int, last: int, *, decoded: int) -> StagedTransfer:
    """Chunks first..last of stream 1 of transfer "a", handed over as a piece."""
    stream = StreamManifest.of(1, "t1", ChunkRange(first, last, False), decoded)
    staged = streams("a")
    manifest = staged.manifest.model_copy(update={"streams": (stream,)})
    return StagedTransfer(staged.directory, manifest)


def test_pieces_of_a_stream_join_in_order_and_never_past_a_piece_left_out() -> None:
    queue = PrestageQueue(cast(Any, None), cast(Any, Merging()), lambda: True)
    first = transfer("a")
    half = MERGE_MAX_BYTES // 2
    queue._pending = [
        (first, piece(1, 2, decoded=half)),
        (first, piece(3, 4, decoded=half)),
        (first, piece(5, 6, decoded=half + 1)),  # too big to join: 7-8 waits behind it
        (first, piece(7, 8, decoded=1)),
    ]
    _, staged = queue._take()
    assert [s.chunks for s in staged.manifest.streams] == [ChunkRange(1, 4, False)]
    _, staged = queue._take()
    assert [s.chunks for s in staged.manifest.streams] == [ChunkRange(5, 8, False)]
    assert not queue._pending


class Applying:
    """An open apply as `PrestageQueue.idle` sees it: whether an apply still runs."""

    def __init__(self, running: bool) -> None:
        self.running = running

    def applying(self) -> bool:
        return self.running


def test_prestaging_is_idle_only_with_nothing_queued_and_no_open_apply_still_applying() -> None:
    queue = PrestageQueue(cast(Any, None), cast(Any, Merging()), lambda: True)
    assert queue.idle()
    queue._pending = [(transfer("a"), streams("a", 1))]
    assert not queue.idle()  # a hand-over waits
    queue._pending = []
    opened = Applying(running=True)
    queue._opened["a"] = cast(Any, opened)
    assert not queue.idle()  # a piece still applies in the delta's open transaction
    opened.running = False
    assert queue.idle()
