"""Chunks `first`..`last` of one stream of a delta: the one value for "these chunks" from the
agent's tracker (what it offers for prestaging) through the staged hand-over (a stream's
`StreamManifest.chunks`) to the store's apply of a piece.

`ends_stream` says whether `last` is the stream's last chunk (PROTOCOL.md, `isLastChunk`):
a range from chunk 1 that ends its stream is the whole stream; any other is a piece, applied
in the delta's one transaction (`replica_store.pieces`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChunkRange:
    first: int
    last: int
    ends_stream: bool

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.last:
            raise ValueError(f"not a chunk range: {self.first}..{self.last}")

    @classmethod
    def whole(cls, chunk_count: int) -> ChunkRange:
        """Every chunk of a stream of `chunk_count` chunks."""
        return cls(1, chunk_count, True)

    @property
    def is_whole(self) -> bool:
        """Every chunk of the stream, from its first to its last."""
        return self.first == 1 and self.ends_stream

    @property
    def numbers(self) -> range:
        return range(self.first, self.last + 1)

    def joined(self, later: ChunkRange) -> ChunkRange:
        """This range and the one right after it (a..b, then b+1..c) as one: a..c."""
        if later.first != self.last + 1:
            raise ValueError(f"{later} does not follow {self}")
        return ChunkRange(self.first, later.last, later.ends_stream)

    def from_chunk(self, first: int) -> ChunkRange | None:
        """The range with `first` as its first chunk, before or after its own (None: past
        its last): what is left to apply of it after chunks 1..`first` - 1 were applied."""
        if first > self.last:
            return None
        return ChunkRange(first, self.last, self.ends_stream)

    def __str__(self) -> str:
        return f"{self.first}-{self.last}{'' if self.ends_stream else '+'}"
