"""`ChunkRange`: the one value for "chunks a..b of a stream", from the tracker to the piece."""

from __future__ import annotations

import pytest

from protocol.chunk_range import ChunkRange


def test_a_range_is_whole_only_from_chunk_one_to_the_stream_end() -> None:
    assert ChunkRange.whole(3) == ChunkRange(1, 3, True)
    assert ChunkRange(1, 3, True).is_whole
    assert not ChunkRange(1, 3, False).is_whole
    assert not ChunkRange(2, 3, True).is_whole
    assert list(ChunkRange(2, 4, False).numbers) == [2, 3, 4]


@pytest.mark.parametrize(("first", "last"), [(0, 3), (3, 2), (-1, 1)])
def test_an_empty_or_negative_range_is_refused(first: int, last: int) -> None:
    with pytest.raises(ValueError, match="not a chunk range"):
        ChunkRange(first, last, True)


def test_pieces_join_only_when_the_later_follows_the_earlier() -> None:
    assert ChunkRange(1, 2, False).joined(ChunkRange(3, 5, True)) == ChunkRange(1, 5, True)
    with pytest.raises(ValueError, match="does not follow"):
        ChunkRange(1, 2, False).joined(ChunkRange(4, 5, True))
    with pytest.raises(ValueError, match="does not follow"):
        ChunkRange(1, 2, False).joined(ChunkRange(2, 5, True))


def test_from_chunk_moves_the_start_either_way_and_runs_out_past_the_end() -> None:
    piece = ChunkRange(3, 5, False)
    assert piece.from_chunk(4) == ChunkRange(4, 5, False)
    assert piece.from_chunk(1) == ChunkRange(1, 5, False)  # a prestage lost: from the start
    assert piece.from_chunk(6) is None
