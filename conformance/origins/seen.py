"""What the judge keeps of an origin's messages: transfers and streams seen, violations."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from protocol.errors import ErrorCode
from protocol.gaps import Gap
from protocol.messages import DeltaInKey, DeltaInResult


@dataclass(frozen=True)
class Where:
    topic: str
    partition: int
    offset: int
    #: When the origin produced it (the record's CreateTime, ms; None: not known).
    produced_ms: int | None = field(default=None, compare=False)

    def before(self, at_ms: int | None) -> bool:
        """Produced before `at_ms` (an answer, a report): so no reaction to it."""
        return self.produced_ms is not None and at_ms is not None and self.produced_ms < at_ms

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    where: Where | None = None
    #: What a correct replica answers the transfer for it (None: nothing at once).
    code: ErrorCode | None = field(default=None, compare=False)

    def __str__(self) -> str:
        at = f" ({self.where})" if self.where else ""
        return f"{self.rule}: {self.message}{at}"


@dataclass
class StreamSeen:
    table: str
    chunks: dict[int, str] = field(default_factory=dict)  # chunk number -> body digest
    rows: dict[int, list[bytes]] = field(default_factory=dict)  # chunk number -> row digests
    last: int | None = None

    def complete(self) -> bool:
        return self.last is not None and all(n in self.chunks for n in range(1, self.last + 1))


@dataclass
class TransferSeen:
    key: DeltaInKey
    streams: dict[int, StreamSeen] = field(default_factory=dict)
    completed: bool = False
    final: DeltaInResult | None = None  # its final answer, once given
    #: What the replica said it misses (None: nothing said): resends must be among these.
    missing: list[Gap] | None = None
    asked_since_complete: bool = False
    #: The last gap report (INCOMPLETE_DELTA or `delta.rs`), kept after completion.
    reported: list[Gap] | None = None
    #: Chunks the replica pretended to lose (`pretend_lost`): (stream, chunk) -> body digest.
    dropped: dict[tuple[int, int], str] = field(default_factory=dict)
    #: When its final answer, and the last report of what it misses, were sent (ms).
    answered_at_ms: int | None = None
    reported_at_ms: int | None = None

    @property
    def request_id(self) -> str:
        return self.key.request_id

    def complete(self) -> bool:
        total = self.key.stream_total
        return len(self.streams) == total and all(s.complete() for s in self.streams.values())

    def content(self) -> dict[str, str]:
        """Per table, a digest of its rows in chunk order (chunking does not matter)."""
        out = {}
        for stream in self.streams.values():
            digest = hashlib.sha256()
            for number in sorted(stream.rows):
                for row in stream.rows[number]:
                    digest.update(row)
            out[stream.table] = digest.hexdigest()
        return out


def listed(gaps: list[Gap] | None) -> str:
    return ", ".join(str(g) for g in gaps or ())


def named(gaps: list[Gap], key: DeltaInKey) -> bool:
    return any(
        g.stream == key.stream_number
        and (g.first is None or g.last is None or g.first <= key.chunk_number <= g.last)
        for g in gaps
    )
