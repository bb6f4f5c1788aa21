"""One transfer's state: its framing, its streams, and where it is in its life.

The framing (what the first chunk's key says of the whole transfer) is a frozen model: it
never changes once the transfer is open. The rest changes, and only the tracker changes it
(`TransferTracker`: chunks admitted, sizes measured, sealed, load started and ended, reported
incomplete, read again from disk); staging persists it, answers read it. Nothing about a
transfer lives anywhere else, so bounds and supervision have one place to look.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from protocol.chunk_range import ChunkRange
from protocol.gaps import Gap, cap_items, stream_gaps
from protocol.messages import DeltaInKey, TransferProgress

#: What a chunk costs of the staging budget at least: an empty body is still a file (an
#: inode, a block, a directory entry), so a flood of zero-byte chunks is not free.
CHUNK_COST = 4096


class TransferFraming(BaseModel):
    """What every chunk of a transfer repeats of it; staged as its `transfer.json`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    datamart: str
    delta_num: int
    delta_date: datetime
    subscription: str
    stream_total: int

    @classmethod
    def of(cls, key: DeltaInKey) -> TransferFraming:
        return cls(
            request_id=key.request_id,
            datamart=key.datamart,
            delta_num=key.delta_num,
            delta_date=key.delta_date,
            subscription=key.subscription,
            stream_total=key.stream_total,
        )

    def log_ids(self) -> dict[str, object]:
        """What names this transfer in every log record about it."""
        return {"datamart": self.datamart, "deltaNum": self.delta_num, "requestId": self.request_id}


@dataclass
class StreamState:
    table_name: str
    chunks: set[int] = field(default_factory=set)
    last: int | None = None
    #: What its chunk bodies decompress to (what the loader plans slices from); None:
    #: not measured yet (recovered from disk).
    decoded_bytes: int | None = field(default=0, compare=False)

    def gaps(self, stream_number: int) -> list[Gap]:
        return stream_gaps(stream_number, self.chunks, self.last)

    @property
    def complete(self) -> bool:
        return self.last is not None and len(self.chunks) == self.last


@dataclass(frozen=True)
class Offer:
    """Chunks of a stream handed to prestaging, and about what they decompress to (None:
    not measured)."""

    chunks: ChunkRange
    decoded: int | None


class Phase(StrEnum):
    """Where an open transfer is in its life."""

    RECEIVING = "receiving"  # chunks arrive; answered INCOMPLETE_DELTA at its deadline
    REPORTED_INCOMPLETE = "reported-incomplete"  # so answered; a new chunk re-arms it
    SEALED = "sealed"  # complete, its manifest written: waiting for the load worker
    LOADING = "loading"  # the loader is applying it


@dataclass
class Transfer:
    """One transfer as far as it has arrived. `streams` maps stream number to its state."""

    framing: TransferFraming
    streams: dict[int, StreamState] = field(default_factory=dict)
    phase: Phase = Phase.RECEIVING
    #: When a still receiving transfer is answered INCOMPLETE_DELTA (the caller's clock).
    deadline: float = math.inf
    #: When its first chunk arrived in this run (None: it was recovered from spool).
    first_seen: float | None = None
    #: Bytes of its chunk bodies as staged (what it takes of the staging budget).
    staged_bytes: int = 0
    #: Streams complete while it was receiving and handed to prestaging (`prestage`).
    prestage_offered: set[int] = field(default_factory=set)
    #: Streams not complete yet handed to prestaging in pieces: the last chunk handed over.
    pieces_offered: dict[int, int] = field(default_factory=dict)
    #: Per stream, the chunks 1..n all staged (found while looking for pieces).
    staged_prefix: dict[int, int] = field(default_factory=dict)
    #: Its delta was applied when it opened: only its chunk numbers are tracked (no body
    #: is staged, no budget taken), and once complete it is answered from the registry.
    replay: bool = False

    @property
    def request_id(self) -> str:
        return self.framing.request_id

    @property
    def datamart(self) -> str:
        return self.framing.datamart

    @property
    def delta_num(self) -> int:
        return self.framing.delta_num

    @property
    def delta_date(self) -> datetime:
        return self.framing.delta_date

    @property
    def subscription(self) -> str:
        return self.framing.subscription

    @property
    def stream_total(self) -> int:
        return self.framing.stream_total

    def overdue(self, now: float) -> bool:
        return self.phase is Phase.RECEIVING and self.deadline <= now and not self.complete

    def log_ids(self) -> dict[str, object]:
        return self.framing.log_ids()

    def seconds_since_first(self) -> float | None:
        """Seconds since its first chunk in this run (None: it was recovered from spool)."""
        first = self.first_seen
        return None if first is None else round(time.perf_counter() - first, 3)

    @classmethod
    def opened_by(cls, key: DeltaInKey) -> Transfer:
        return cls(TransferFraming.of(key))

    @property
    def complete(self) -> bool:
        return len(self.streams) == self.stream_total and all(
            s.complete for s in self.streams.values()
        )

    @property
    def chunks_received(self) -> int:
        return sum(len(s.chunks) for s in self.streams.values())

    def gaps(self) -> list[Gap]:
        """What it still lacks, stream by stream."""
        found: list[Gap] = []
        for number in range(1, self.stream_total + 1):
            stream = self.streams.get(number)
            found.extend([Gap(number)] if stream is None else stream.gaps(number))
        return found

    @property
    def evictable(self) -> bool:
        """Still receiving: not yet handed to the loader."""
        return self.phase in (Phase.RECEIVING, Phase.REPORTED_INCOMPLETE)

    def missing(self, limit: int = 100) -> list[str]:
        """The gaps as `delta.rs` names them, at most `limit` of them."""
        return cap_items(self.gaps(), limit)

    def progress(self, limit: int = 100) -> TransferProgress:
        return TransferProgress(
            request_id=self.request_id,
            delta_num=self.delta_num,
            stream_total=self.stream_total,
            streams_complete=sum(1 for s in self.streams.values() if s.complete),
            chunks_received=self.chunks_received,
            missing=tuple(self.missing(limit)),
        )
