"""The protocol's single definitions: gap items, the sequence rules, chunk file names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.chunk_files import ChunkFile
from protocol.errors import ErrorCode
from protocol.gaps import (
    Gap,
    format_gaps,
    incomplete_message,
    parse_gaps,
    stream_gaps,
)
from protocol.sequence import AppliedDelta, check_sequence, expected_next

T0 = datetime(2026, 1, 1, tzinfo=UTC)

# --- gaps -----------------------------------------------------------------------------------


def oracle(stream: int, chunks: set[int], last: int | None) -> list[str]:
    """Gaps by checking every number up to the top, one by one (the old way)."""
    top = last if last is not None else max(chunks, default=0)
    items, start = [], None
    for number in range(1, top + 2):
        present = number in chunks or number > top
        if not present and start is None:
            start = number
        elif present and start is not None:
            items.append(f"stream {stream} chunks {start}-{number - 1}")
            start = None
    if last is None:
        items.append(f"stream {stream} last chunk")
    return items


streams = st.integers(1, 10_000)
StreamState = tuple[int, set[int], int | None]


@st.composite
def stream_states(draw: st.DrawFn) -> StreamState:
    chunks = draw(st.sets(st.integers(1, 60), max_size=30))
    if draw(st.booleans()):
        last = draw(st.integers(max(chunks, default=1), 70))
        chunks.add(last)  # the last chunk is known only once it arrived
        return draw(streams), chunks, last
    return draw(streams), chunks, None


@given(stream_states())
def test_stream_gaps_equal_the_number_by_number_reading(
    state: tuple[int, set[int], int | None],
) -> None:
    stream, chunks, last = state
    assert format_gaps(stream_gaps(stream, chunks, last)) == oracle(stream, chunks, last)


@given(st.lists(stream_states(), max_size=5))
def test_gap_items_round_trip(states: list[StreamState]) -> None:
    gaps = [g for s, c, last in states for g in stream_gaps(s, c, last)]
    assert parse_gaps(format_gaps(gaps)) == gaps
    assert parse_gaps(incomplete_message(gaps)) == gaps
    assert format_gaps(parse_gaps(format_gaps(gaps))) == format_gaps(gaps)


def test_the_contracts_spelling() -> None:
    gaps = stream_gaps(2, {1, 2, 5}, None) + stream_gaps(3, {1, 4}, 4)
    assert format_gaps(gaps) == [
        "stream 2 chunks 3-4",
        "stream 2 last chunk",
        "stream 3 chunks 2-3",
    ]
    assert incomplete_message(gaps[:2]) == "missing: stream 2 chunks 3-4, stream 2 last chunk"


def test_a_huge_claimed_chunk_number_makes_one_gap_at_once() -> None:
    assert stream_gaps(1, {1, 2**62}, 2**62) == [Gap(1, 2, 2**62 - 1)]


def test_unreadable_or_impossible_items_are_not_gaps() -> None:
    assert parse_gaps(["nothing we can read", "stream 1 chunks 5-2", "stream 1 chunks 0-3"]) == []
    with pytest.raises(ValueError, match="chunk range"):
        Gap(1, 0, 3)
    with pytest.raises(ValueError, match="both ends"):
        Gap(1, 2, None)


# --- the sequence ---------------------------------------------------------------------------


def test_expected_next() -> None:
    assert expected_next(None) == 0
    assert expected_next(4) == 5
    assert expected_next(AppliedDelta(4, T0)) == 5


@pytest.mark.parametrize(
    ("num", "date", "applied_date", "last", "code"),
    [
        (0, T0, None, None, None),  # the first delta
        (1, T0 + timedelta(1), None, AppliedDelta(0, T0), None),  # the next one
        (0, T0, T0, AppliedDelta(0, T0), None),  # applied, same date: the stored answer
        (0, T0 + timedelta(1), T0, AppliedDelta(0, T0), ErrorCode.DELTA_CONFLICT),
        (2, T0 + timedelta(1), None, AppliedDelta(0, T0), ErrorCode.OUT_OF_SEQUENCE),
        (1, T0, None, AppliedDelta(0, T0), ErrorCode.DELTA_CONFLICT),  # not later
        (1, T0 - timedelta(1), None, AppliedDelta(0, T0), ErrorCode.DELTA_CONFLICT),
        (1, T0, None, None, ErrorCode.OUT_OF_SEQUENCE),  # an empty replica expects 0
    ],
)
def test_the_sequence_rules(
    num: int,
    date: datetime,
    applied_date: datetime | None,
    last: AppliedDelta | None,
    code: ErrorCode | None,
) -> None:
    refusal = check_sequence(num, date, applied_date=applied_date, last=last)
    assert (None if refusal is None else refusal.code) == code
    if refusal is not None:
        assert refusal.error().code == code
        assert f"delta {num}" in refusal.message


# --- chunk file names -----------------------------------------------------------------------


@given(st.integers(1, 2**40), st.integers(1, 2**62))
def test_chunk_file_names_round_trip(stream: int, chunk: int) -> None:
    assert ChunkFile.parse(ChunkFile(stream, chunk).name) == (stream, chunk)


def test_chunk_file_names_sort_and_refuse_strangers() -> None:
    assert ChunkFile(1, 1).name == "s000001-c000000001.avro"
    assert ChunkFile(2, 10).name > ChunkFile(2, 9).name > ChunkFile(1, 99).name
    for stranger in ("manifest.json", "s000001.json", "s0000001-c000000001.avro", "x.avro"):
        assert ChunkFile.parse(stranger) is None
