"""Hand-overs to prestaging waiting together are staged together (pure logic): streams of
one transfer that completed while a prestage ran make one prestage, not one each."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from replica_agent.prestaging import MERGE_MAX_BYTES, Prestaging
from replica_agent.transfers import Transfer, TransferFraming
from replica_store.transfer import StagedTransfer, StreamManifest, TransferManifest


def transfer(request_id: str) -> Transfer:
    return Transfer(
        TransferFraming(
            request_id=request_id, datamart="dm", delta_num=3,
            delta_date=datetime(2026, 1, 1, tzinfo=UTC), subscription="s", stream_total=9,
        )
    )  # fmt: skip


def streams(request_id: str, *numbers: int, decoded: int | None = None) -> StagedTransfer:
    manifest = TransferManifest(
        datamart="dm", delta_num=3, delta_date=datetime(2026, 1, 1, tzinfo=UTC),
        request_id=request_id,
        streams=tuple(
            StreamManifest(stream_number=n, table_name=f"t{n}", chunk_count=1,
                           decoded_bytes=decoded)
            for n in numbers
        ),
    )  # fmt: skip
    return StagedTransfer(Path("/nowhere") / request_id, manifest)


def test_the_streams_of_one_transfer_waiting_together_make_one_prestage() -> None:
    prestaging = Prestaging(cast(Any, None), cast(Any, None), lambda: True)
    first, other = transfer("a"), transfer("b")
    prestaging._pending = [
        (first, streams("a", 2)), (other, streams("b", 1)), (first, streams("a", 1, 4)),
    ]  # fmt: skip
    taken, staged = prestaging._take()
    assert taken is first
    assert [s.stream_number for s in staged.manifest.streams] == [1, 2, 4]
    assert staged.directory == Path("/nowhere/a")
    assert [(t, s.manifest.request_id) for t, s in prestaging._pending] == [(other, "b")]
    taken, staged = prestaging._take()
    assert taken is other
    assert [s.stream_number for s in staged.manifest.streams] == [1]


def test_streams_are_merged_only_up_to_the_bound_so_the_load_never_waits_for_a_big_prestage() -> (
    None
):
    prestaging = Prestaging(cast(Any, None), cast(Any, None), lambda: True)
    first = transfer("a")
    half = MERGE_MAX_BYTES // 2
    prestaging._pending = [
        (first, streams("a", 1, decoded=half)), (first, streams("a", 2, decoded=half + 1)),
        (first, streams("a", 3, decoded=half)), (first, streams("a", 4, decoded=half)),
    ]  # fmt: skip
    _, staged = prestaging._take()
    assert [s.stream_number for s in staged.manifest.streams] == [1, 3]
    _, staged = prestaging._take()
    assert [s.stream_number for s in staged.manifest.streams] == [2]
    _, staged = prestaging._take()
    assert [s.stream_number for s in staged.manifest.streams] == [4]


class Applying:
    """An open apply as `Prestaging.idle` sees it: whether an apply still runs."""

    def __init__(self, running: bool) -> None:
        self.running = running

    def applying(self) -> bool:
        return self.running


def test_prestaging_is_idle_only_with_nothing_queued_and_no_open_apply_still_applying() -> None:
    prestaging = Prestaging(cast(Any, None), cast(Any, None), lambda: True)
    assert prestaging.idle()
    prestaging._pending = [(transfer("a"), streams("a", 1))]
    assert not prestaging.idle()  # a hand-over waits
    prestaging._pending = []
    opened = Applying(running=True)
    prestaging._opened["a"] = cast(Any, opened)
    assert not prestaging.idle()  # a piece still applies in the delta's open transaction
    opened.running = False
    assert prestaging.idle()
