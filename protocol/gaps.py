"""What a transfer still lacks, as PROTOCOL.md spells it: one item per gap.

    stream S chunks A-B     chunks A..B of stream S have not arrived (A <= B)
    stream S last chunk     the last chunk of stream S has not arrived, so where the
                            stream ends is unknown

The items are `TransferProgress.missing` in `delta.rs`, and, joined by ", " after
"missing: ", the `errorMessage` of an `INCOMPLETE_DELTA` answer. A long list is capped: its
first items, then "and N more gaps" (which names no gap, so a parser skips it). The agent
formats them here and the reference origin parses them here, so both sides read one
definition.

Computing a stream's gaps costs time in the chunks received, never in a chunk number a
message claims: a hostile `chunkNumber` of 2**62 makes one gap, not 2**62 checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

INCOMPLETE_PREFIX = "missing: "
_ITEM = re.compile(r"stream (\d+) (?:chunks (\d+)-(\d+)|last chunk)")


@dataclass(frozen=True, order=True)
class Gap:
    """Chunks `first..last` of stream `stream`; both None: the stream's last chunk."""

    stream: int
    first: int | None = None
    last: int | None = None

    def __post_init__(self) -> None:
        if (self.first is None) != (self.last is None):
            raise ValueError("a gap names both ends of a chunk range, or neither")
        if self.first is not None and self.last is not None and not 1 <= self.first <= self.last:
            raise ValueError(f"not a chunk range: {self.first}-{self.last}")

    @property
    def is_last_chunk(self) -> bool:
        return self.first is None

    def __str__(self) -> str:
        if self.first is None:
            return f"stream {self.stream} last chunk"
        return f"stream {self.stream} chunks {self.first}-{self.last}"


def stream_gaps(stream: int, chunks: Iterable[int], last: int | None) -> list[Gap]:
    """The gaps of one stream that holds `chunks`, whose last chunk is `last` if known."""
    gaps: list[Gap] = []
    expected = 1
    for number in sorted(chunks):
        if last is not None and number > last:
            break
        if number > expected:
            gaps.append(Gap(stream, expected, number - 1))
        expected = max(expected, number + 1)
    if last is None:
        gaps.append(Gap(stream, None, None))
    elif expected <= last:
        gaps.append(Gap(stream, expected, last))
    return gaps


def format_gaps(gaps: Iterable[Gap]) -> list[str]:
    return [str(g) for g in gaps]


def cap_items(gaps: Sequence[Gap], limit: int) -> list[str]:
    """The first `limit` items, then one more saying how many gaps were left out."""
    items = format_gaps(gaps[:limit])
    if len(gaps) > limit:
        items.append(f"and {len(gaps) - limit} more gaps")
    return items


def incomplete_message(gaps: Sequence[Gap], limit: int = 100) -> str:
    """The `errorMessage` of an `INCOMPLETE_DELTA` answer (at most `limit` gaps named)."""
    return INCOMPLETE_PREFIX + ", ".join(cap_items(gaps, limit))


#: How an `INCOMPLETE_DELTA` says the replica removed the transfer to keep its staging budget:
#: nothing of it is kept, so the origin sends the delta again under a new `requestId`.
REMOVED = "removed to keep the replica's staging budget"


def removed_message(gaps: Sequence[Gap], limit: int = 100) -> str:
    """The `errorMessage` of an `INCOMPLETE_DELTA` for a transfer the replica removed."""
    return (
        f"{incomplete_message(gaps, limit)}; {REMOVED} (open transfers or bytes): "
        "send the delta again"
    )


def says_removed(message: str | None) -> bool:
    """Does an `INCOMPLETE_DELTA`'s message say the transfer was removed (`REMOVED`)?"""
    return REMOVED in (message or "")


def parse_gaps(texts: str | Iterable[str]) -> list[Gap]:
    """Every gap item in `texts` (`missing` items, or an `INCOMPLETE_DELTA` message)."""
    if isinstance(texts, str):
        texts = [texts]
    found: list[Gap] = []
    for text in texts:
        for match in _ITEM.finditer(text):
            stream, first, last = match.groups()
            if first is None:
                found.append(Gap(int(stream)))
            else:
                low, high = int(first), int(last)
                if 1 <= low <= high:
                    found.append(Gap(int(stream), low, high))
    return found
