"""The transfer tracker: PROTOCOL.md's chunk rules, with no I/O and no Faust.

Per `requestId` it checks each chunk's framing against what the transfer has shown so far,
checks the sequence against the applied deltas, de-duplicates by (stream, chunk), and says
when the transfer is complete and what it still misses. It decides; the caller stages bodies,
loads and answers. Rejected and answered transfers are "finished": their later chunks are
dropped silently.

Each open transfer is one `Transfer` value: its framing, its streams, and where it is in its
life (`Phase`: receiving, answered incomplete, sealed, loading), with the deadline of its
incomplete answer. The caller moves it along; nothing about a transfer lives elsewhere.
The sequence rules are `protocol.sequence`'s and the gap items `protocol.gaps`'.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal

from protocol.body import read_body_layout
from protocol.errors import ErrorCode, ProtocolError
from protocol.gaps import Gap, format_gaps, stream_gaps
from protocol.messages import DeltaInKey, TransferProgress
from protocol.schema import LogicalSchema
from protocol.sequence import AppliedDelta, SequenceRefusal, check_sequence, expected_next


@dataclass
class StreamState:
    table_name: str
    chunks: set[int] = field(default_factory=set)
    last: int | None = None

    def gaps(self, stream_number: int) -> list[Gap]:
        return stream_gaps(stream_number, self.chunks, self.last)

    @property
    def complete(self) -> bool:
        return self.last is not None and len(self.chunks) == self.last


class Phase(StrEnum):
    """Where an open transfer is in its life."""

    RECEIVING = "receiving"  # chunks arrive; answered INCOMPLETE_DELTA at its deadline
    REPORTED_INCOMPLETE = "reported-incomplete"  # so answered; a new chunk re-arms it
    SEALED = "sealed"  # complete, its manifest written: waiting for the load worker
    LOADING = "loading"  # the loader is applying it


@dataclass
class Transfer:
    """One transfer as far as it has arrived. `streams` maps stream number to its state."""

    request_id: str
    datamart: str
    delta_num: int
    delta_date: datetime
    subscription: str
    stream_total: int
    streams: dict[int, StreamState] = field(default_factory=dict)
    phase: Phase = Phase.RECEIVING
    #: When a still receiving transfer is answered INCOMPLETE_DELTA (the caller's clock).
    deadline: float = math.inf
    #: When its first chunk arrived in this run (None: it was recovered from staging).
    first_seen: float | None = None

    def arm(self, deadline: float) -> None:
        """Receiving, and answered INCOMPLETE_DELTA at `deadline` unless complete by then."""
        self.phase = Phase.RECEIVING
        self.deadline = deadline

    def overdue(self, now: float) -> bool:
        return self.phase is Phase.RECEIVING and self.deadline <= now and not self.complete

    @classmethod
    def opened_by(cls, key: DeltaInKey) -> Transfer:
        return cls(
            key.request_id,
            key.datamart,
            key.delta_num,
            key.delta_date,
            key.subscription,
            key.stream_total,
        )

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

    def missing(self) -> list[str]:
        """The gaps as `delta.rs` names them."""
        return format_gaps(self.gaps())

    def progress(self) -> TransferProgress:
        return TransferProgress(
            request_id=self.request_id,
            delta_num=self.delta_num,
            stream_total=self.stream_total,
            streams_complete=sum(1 for s in self.streams.values() if s.complete),
            chunks_received=self.chunks_received,
            missing=tuple(self.missing()),
        )


@dataclass(frozen=True)
class Accepted:
    """The chunk fits. `opened`: it opened the transfer (stage its directory); `new`: stage
    its body; `stream_changed`: persist the stream's state."""

    transfer: Transfer
    opened: bool
    new: bool
    stream_changed: bool
    completed: bool


@dataclass(frozen=True)
class Rejected:
    """Answer the transfer ERROR with `code`; it is finished."""

    key: DeltaInKey
    code: ErrorCode
    message: str
    transfer: Transfer | None


@dataclass(frozen=True)
class Dropped:
    """A chunk of a finished transfer: nothing to do."""

    request_id: str


Admission = Accepted | Rejected | Dropped


@dataclass(frozen=True)
class Decision:
    """What to do with a complete transfer: load it, answer its stored result, or reject."""

    action: Literal["load", "answer-stored", "reject"]
    code: ErrorCode | None = None
    message: str = ""


class TransferTracker:
    """Open transfers, applied deltas and finished transfers of every datamart served."""

    def __init__(
        self,
        schemas: Mapping[str, LogicalSchema],
        applied: Mapping[str, Mapping[int, datetime]],
        finished: Iterable[str] = (),
    ) -> None:
        self.schemas = dict(schemas)
        self.applied: dict[str, dict[int, datetime]] = {
            name: dict(applied.get(name, {})) for name in self.schemas
        }
        self.open: dict[str, Transfer] = {}
        self.finished: set[str] = set(finished)

    # --- the sequence --------------------------------------------------------------------
    def expected(self, datamart: str) -> int:
        return expected_next(self.last_applied(datamart))

    def last_applied(self, datamart: str) -> AppliedDelta | None:
        applied = self.applied[datamart]
        if not applied:
            return None
        number = max(applied)
        return AppliedDelta(number, applied[number])

    def record_applied(self, datamart: str, delta_num: int, delta_date: datetime) -> None:
        self.applied[datamart][delta_num] = delta_date

    def sequence_problem(
        self, datamart: str, delta_num: int, delta_date: datetime
    ) -> SequenceRefusal | None:
        """The sequence rule a delta breaks now, if any."""
        return check_sequence(
            delta_num,
            delta_date,
            applied_date=self.applied[datamart].get(delta_num),
            last=self.last_applied(datamart),
        )

    def decide(self, transfer: Transfer) -> Decision:
        """For a complete transfer: checked again, since another transfer may have loaded."""
        problem = self.sequence_problem(transfer.datamart, transfer.delta_num, transfer.delta_date)
        if problem is not None:
            return Decision("reject", problem.code, problem.message)
        if transfer.delta_num in self.applied[transfer.datamart]:
            return Decision("answer-stored")
        return Decision("load")

    # --- chunks --------------------------------------------------------------------------
    def admit(self, key: DeltaInKey, body: bytes | None) -> Admission:
        """Check one `delta.in` chunk and record it if it fits."""
        if key.request_id in self.finished:
            return Dropped(key.request_id)
        transfer = self.open.get(key.request_id)
        opened = transfer is None
        try:
            if transfer is None:
                self._check_new(key)
                transfer = Transfer.opened_by(key)
            else:
                _check_same_transfer(transfer, key)
            accepted = self._admit_chunk(transfer, key, body, opened=opened)
        except ProtocolError as exc:
            self.finish(key.request_id)
            return Rejected(key, exc.code, exc.message, transfer)
        self.open[key.request_id] = transfer
        return accepted

    def finish(self, request_id: str) -> Transfer | None:
        """Close a transfer (answered or rejected); its later chunks are dropped."""
        self.finished.add(request_id)
        return self.open.pop(request_id, None)

    def restore(self, transfer: Transfer) -> None:
        """Re-open a transfer rebuilt from staging after a restart."""
        self.open[transfer.request_id] = transfer

    def overdue(self, now: float) -> list[Transfer]:
        """Transfers still receiving past their deadline."""
        return [t for t in self.open.values() if t.overdue(now)]

    def loading(self, datamart: str) -> Transfer | None:
        """The datamart's transfer the loader is applying, if any."""
        return next(
            (t for t in self.open.values() if t.datamart == datamart and t.phase is Phase.LOADING),
            None,
        )

    def _check_new(self, key: DeltaInKey) -> None:
        if key.datamart not in self.schemas:
            raise ProtocolError(
                f"datamart {key.datamart!r} is not served by this replica",
                code=ErrorCode.UNKNOWN_DATAMART,
            )
        problem = self.sequence_problem(key.datamart, key.delta_num, key.delta_date)
        if problem is not None:
            raise problem.error()
        if key.stream_total < 1:
            raise ProtocolError(f"streamTotal {key.stream_total} is below 1")

    def _admit_chunk(
        self, transfer: Transfer, key: DeltaInKey, body: bytes | None, *, opened: bool
    ) -> Accepted:
        s, c = key.stream_number, key.chunk_number
        if not 1 <= s <= transfer.stream_total:
            raise ProtocolError(f"streamNumber {s} is outside 1..{transfer.stream_total}")
        if c < 1:
            raise ProtocolError(f"stream {s}: chunkNumber {c} is below 1")
        table = self.schemas[transfer.datamart].table(key.table_name)  # else UNKNOWN_TABLE
        stream = transfer.streams.get(s)
        if stream is None:
            for number, other in transfer.streams.items():
                if other.table_name == key.table_name:
                    raise ProtocolError(
                        f"streams {number} and {s} both name table {key.table_name!r}"
                    )
            stream = StreamState(key.table_name)
        elif stream.table_name != key.table_name:
            raise ProtocolError(
                f"stream {s} names two tables: {stream.table_name!r} and {key.table_name!r}"
            )
        changed = _check_last(stream, s, c, key.is_last_chunk)
        new = c not in stream.chunks
        if new:
            read_body_layout(table, body)  # SCHEMA_MISMATCH / BAD_CHUNK from the header alone
            stream.chunks.add(c)
        if s not in transfer.streams:
            transfer.streams[s] = stream
            changed = True
        return Accepted(transfer, opened, new, changed, (new or changed) and transfer.complete)


def _check_same_transfer(transfer: Transfer, key: DeltaInKey) -> None:
    for name, mine, theirs in (
        ("datamart", transfer.datamart, key.datamart),
        ("deltaNum", transfer.delta_num, key.delta_num),
        ("deltaDate", transfer.delta_date, key.delta_date),
        ("streamTotal", transfer.stream_total, key.stream_total),
    ):
        if mine != theirs:
            raise ProtocolError(f"{name} differs between chunks: {mine} and {theirs}")


def _check_last(stream: StreamState, s: int, c: int, is_last: bool) -> bool:
    """The last-chunk rules; True when this chunk makes the stream's last chunk known."""
    if is_last:
        if stream.last is not None and stream.last != c:
            raise ProtocolError(f"stream {s} has two last chunks: {stream.last} and {c}")
        if stream.chunks and max(stream.chunks) > c:
            raise ProtocolError(
                f"stream {s}: chunk {max(stream.chunks)} is beyond the last chunk {c}"
            )
        if stream.last is None:
            stream.last = c
            return True
        return False
    if stream.last is not None and c > stream.last:
        raise ProtocolError(f"stream {s}: chunk {c} is beyond the last chunk {stream.last}")
    if stream.last == c:
        raise ProtocolError(f"stream {s}: chunk {c} arrived as the last chunk and as not last")
    return False
