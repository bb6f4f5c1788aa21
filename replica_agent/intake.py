"""`delta.in` chunks in: admitted one by one, staged in groups, their verdicts returned.

The intake owns "chunks in → files durable → verdicts", and never answers. The caller hands
`ChunkIntake.receive` every `delta.in` message already waiting (a group). The tracker admits
each in Kafka's order, exactly as if it came alone. What a chunk needs on disk (its body;
its stream's file when the stream changed) is collected, and the group's files are written
together by `ChunkSpool.write_group`: each file as durable as before, their fsyncs side
by side, one directory fsync per transfer, where one chunk at a time paid two fsyncs.

A chunk that completes its transfer first flushes what is pending, so the seal sees the disk
as the tracker does. A file that cannot be written fails its message (the app skips it as
poison) and its transfer is read again from disk: the files are the truth. `receive` returns
once every file of the group is durable, with the group's outcomes in order: transfers
completed (sealed: the `StagedTransfer` for the loader), refused (answer ERROR) and evicted
(answer INCOMPLETE_DELTA). The app acks a group's events only after that, so no offset is
committed before its chunk's files are durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from podd_runtime.files import FileWrite
from podd_runtime.rate_limit import Throttle
from protocol.codec import decode_delta_in_key
from protocol.errors import ErrorCode, MessageDecodeError
from protocol.messages import DeltaInKey
from replica_agent.admission import Accepted, Dropped, Rejected
from replica_agent.chunk_spool import ChunkSpool
from replica_agent.errors import FatalAgentError
from replica_agent.metrics import AgentMetrics
from replica_agent.tracker import TransferTracker
from replica_agent.transfers import Transfer, TransferFraming
from replica_store.transfer import StagedTransfer

log = structlog.get_logger("replica_agent")

#: One `delta.in` message: its raw key and value.
RawMessage = tuple[bytes | None, bytes | None]


@dataclass(frozen=True)
class Completed:
    """A transfer is complete and sealed: `staged` is the loader's hand-over."""

    transfer: Transfer
    staged: StagedTransfer


@dataclass(frozen=True)
class Refused:
    """A transfer is refused (finished): answer it ERROR with `code`."""

    framing: TransferFraming
    code: ErrorCode
    message: str


@dataclass(frozen=True)
class Evicted:
    """A transfer still receiving was removed to keep a staging budget (finished): answer
    it INCOMPLETE_DELTA."""

    transfer: Transfer


@dataclass(frozen=True)
class StreamsReady:
    """Streams of a transfer still receiving are complete, their files durable: `staged`
    names them, for prestaging (`spark_loader.prestage`)."""

    transfer: Transfer
    staged: StagedTransfer


@dataclass(frozen=True)
class Replayed:
    """A transfer of a delta applied before is complete (nothing of it was staged): answer
    it from the registry."""

    transfer: Transfer


Outcome = Completed | Refused | Evicted | StreamsReady | Replayed


@dataclass
class Received:
    """A group handled: per message, the unexpected error that made it fail (None: handled,
    whatever the verdict); and the transfers' outcomes, in the order they happened."""

    failures: list[Exception | None]
    outcomes: list[Outcome] = field(default_factory=list)
    #: Transfers a new chunk of which was staged (checked for prestaging once the group is
    #: durable: a stream complete, or a piece of one).
    progressed: dict[str, Transfer] = field(default_factory=dict)


@dataclass(frozen=True)
class _Owner:
    """The message a pending file serves (its place in the group), and its transfer."""

    index: int
    transfer: Transfer


@dataclass
class _Pending:
    """Files collected for one group write, each with the messages it serves."""

    #: A chunk body: its bytes, its message, its stream number.
    bodies: dict[Path, tuple[bytes, _Owner, int]] = field(default_factory=dict)
    #: A stream file: its latest state, and every message that changed it in this group.
    streams: dict[Path, tuple[bytes, list[_Owner]]] = field(default_factory=dict)

    def add_body(self, owner: _Owner, stream: int, file: FileWrite) -> None:
        self.bodies[file[0]] = (file[1], owner, stream)

    def add_stream(self, owner: _Owner, file: FileWrite) -> None:
        _, owners = self.streams.get(file[0], (b"", []))
        self.streams[file[0]] = (file[1], [*owners, owner])

    def take(self) -> _Pending:
        """What is pending, moved out (this one is left empty)."""
        taken = _Pending(self.bodies, self.streams)
        self.bodies, self.streams = {}, {}
        return taken

    def owners(self, path: Path) -> list[_Owner]:
        if path in self.bodies:
            return [self.bodies[path][1]]
        return self.streams[path][1]


class ChunkIntake:
    """`delta.in` chunks → durable files → outcomes, for one agent's tracker and staging."""

    def __init__(
        self,
        tracker: TransferTracker,
        spool: ChunkSpool,
        metrics: AgentMetrics,
        *,
        incomplete_timeout: float,
        clock: Callable[[], float],
        prestage_min_bytes: int = 1,
        prestage_piece_bytes: int = 0,
        prestage_eager_bytes: int = 0,
        prestage_idle: Callable[[], bool] = lambda: False,
    ) -> None:
        self.tracker = tracker
        #: Streams that decode to fewer bytes are not offered for prestaging.
        self.prestage_min_bytes = prestage_min_bytes
        #: Streams not complete yet are offered in pieces of about this many decoded bytes
        #: (0: only complete streams are).
        self.prestage_piece_bytes = prestage_piece_bytes
        #: ... or, while nothing is being prestaged (`prestage_idle`), once they decode to
        #: this many (0: never before `prestage_piece_bytes`). A prestager with room takes
        #: what there is, so little is left for after the last chunk; a busy one takes
        #: bigger pieces, fewer of them, as the chunks pile up while it works.
        self.prestage_eager_bytes = prestage_eager_bytes
        self.prestage_idle = prestage_idle
        self.spool = spool
        self.metrics = metrics
        self.incomplete_timeout = incomplete_timeout
        self.clock = clock
        #: Warnings about messages that get no answer (a flood must not fill the log).
        self._warnings = Throttle()

    async def receive(self, messages: Sequence[RawMessage]) -> Received:
        """Handle a group of messages in order; every file is durable when it returns.
        `FatalAgentError` and cancellation propagate."""
        done = Received([None] * len(messages))
        pending = _Pending()
        with contextlib.suppress(OSError):  # the disk's room caps the staging budget
            self.tracker.disk_room(self.spool.room())
        for index, (raw_key, raw_value) in enumerate(messages):
            try:
                await self._one(index, raw_key, raw_value, pending, done)
            except FatalAgentError:
                raise
            except Exception as exc:
                done.failures[index] = done.failures[index] or exc
        await self._flush(pending, done)
        for transfer in done.progressed.values():
            if self.tracker.open.get(transfer.request_id) is not transfer:
                continue  # refused, evicted or read again from disk meanwhile
            offers = self.tracker.take_prestage(
                transfer, self.prestage_min_bytes, self._piece_bytes()
            )
            if offers:
                staged = await asyncio.to_thread(self.spool.complete_streams, transfer, offers)
                done.outcomes.append(StreamsReady(transfer, staged))
        return done

    def _piece_bytes(self) -> int:
        """The decoded size at which a stream still arriving is offered now."""
        piece, eager = self.prestage_piece_bytes, self.prestage_eager_bytes
        if piece and eager and self.prestage_idle():
            return min(piece, eager)
        return piece

    def _deadline(self) -> float:
        return self.clock() + self.incomplete_timeout

    async def _one(
        self,
        index: int,
        raw_key: bytes | None,
        raw_value: bytes | None,
        pending: _Pending,
        done: Received,
    ) -> None:
        try:
            key = decode_delta_in_key(raw_key)
        except MessageDecodeError as exc:
            self.metrics.undecodable.labels("delta.in").inc()
            if self._warnings.allow():  # counted always, logged at a bounded rate
                log.warning(
                    "delta.in message skipped: its key cannot be decoded",
                    error=str(exc)[:500],
                    not_logged_before=self._warnings.take_suppressed(),
                )
            return
        admission = self.tracker.admit(key, raw_value)
        done.outcomes.extend(Evicted(t) for t in self.tracker.take_evicted())
        for replay in self.tracker.take_dropped_replays():
            self.metrics.dropped.labels("replay").inc()
            log.info("replay dropped to keep the bound on replays", **replay.log_ids())
        if isinstance(admission, Dropped):
            self.metrics.dropped.labels(admission.reason).inc()
            if admission.reason == "oversize" and self._warnings.allow():
                log.warning(
                    "delta.in message dropped: names too long",
                    requestId=admission.request_id,
                    not_logged_before=self._warnings.take_suppressed(),
                )
            return
        if isinstance(admission, Rejected):
            done.outcomes.append(Refused(admission.framing, admission.code, admission.message))
            return
        if admission.transfer.replay:
            self._track_replay(admission, done)
            return
        await self._stage(index, key, raw_value, admission, pending, done)

    def _track_replay(self, accepted: Accepted, done: Received) -> None:
        """A chunk of a delta applied before: nothing is staged; its transfer is answered
        from the registry once complete."""
        transfer = accepted.transfer
        if accepted.opened:
            self.tracker.opened(transfer, self._deadline(), time.perf_counter())
            log.info("first chunk of an applied delta (a replay)", **transfer.log_ids())
        if accepted.new:
            self.tracker.chunk_staged(transfer, self._deadline())
        else:
            self.metrics.duplicates.labels(transfer.datamart).inc()
        if accepted.completed:
            done.outcomes.append(Replayed(transfer))

    async def _stage(
        self,
        index: int,
        key: DeltaInKey,
        body: bytes | None,
        accepted: Accepted,
        pending: _Pending,
        done: Received,
    ) -> None:
        transfer = accepted.transfer
        rid = transfer.request_id
        try:
            if accepted.opened:
                first_seen = time.perf_counter()
                await asyncio.to_thread(self.spool.open_transfer, transfer.framing)
                self.tracker.opened(transfer, self._deadline(), first_seen)
                self.metrics.open_transfers.set(len(self.tracker.open))
                self.metrics.began(transfer.datamart, transfer.delta_num)
                log.info(
                    "first chunk",
                    **transfer.log_ids(),
                    streamTotal=transfer.stream_total,
                    subscription=transfer.subscription[:200],
                )
            stream = transfer.streams[key.stream_number]
            if accepted.new:
                path = self.spool.chunk_path(rid, key.stream_number, key.chunk_number)
                pending.add_body(_Owner(index, transfer), key.stream_number, (path, body or b""))
                self.metrics.chunks.labels(transfer.datamart).inc()
                self.tracker.chunk_staged(transfer, self._deadline())
                done.progressed[rid] = transfer
            else:
                self.metrics.duplicates.labels(transfer.datamart).inc()
            if accepted.stream_changed:
                file = self.spool.stream_file(rid, key.stream_number, stream)
                pending.add_stream(_Owner(index, transfer), file)
        except Exception:
            await self._flush(pending, done)  # what is pending is on disk before reading
            await self._reload(transfer)
            raise
        except BaseException:
            await self._reload(transfer)
            raise
        # A complete transfer still receiving was not sealed: its manifest could not be
        # written (a full disk). The same chunk, handled again, seals it.
        if accepted.completed or (transfer.complete and transfer.evictable):
            await self._flush(pending, done)
            if done.failures[index] is None and self.tracker.open.get(rid) is transfer:
                done.outcomes.append(await self.seal(transfer))

    async def seal(self, transfer: Transfer) -> Completed:
        """A complete transfer, its files durable: its manifest written, the loader's."""
        staged = await asyncio.to_thread(self.spool.seal, transfer)
        sizes = {s.stream_number: s.decoded_bytes for s in staged.manifest.streams}
        self.tracker.sealed(transfer, sizes)
        log.info(
            "complete",
            **transfer.log_ids(),
            chunks=transfer.chunks_received,
            seconds=transfer.seconds_since_first(),
        )
        return Completed(transfer, staged)

    async def _flush(self, pending: _Pending, done: Received) -> None:
        """Write what is pending. A body beyond the limits gets its transfer refused
        (BAD_CHUNK); a file that could not be written fails its message, and its transfer
        is read again from disk."""
        group = pending.take()
        if not group.bodies and not group.streams:
            return
        written = await asyncio.to_thread(
            self.spool.write_group,
            [(path, data) for path, (data, _, _) in group.bodies.items()],
            [(path, data) for path, (data, _) in group.streams.items()],
        )
        self.metrics.staging_writes.inc()
        for path, size in written.sizes.items():
            _, owner, number = group.bodies[path]
            self.tracker.measured(owner.transfer, number, size)
        for path, refused in written.refused.items():
            transfer = group.bodies[path][1].transfer
            if self.tracker.open.get(transfer.request_id) is transfer:
                self.tracker.finish(transfer.request_id)
                message = f"the body is refused: {refused}"
                done.outcomes.append(Refused(transfer.framing, ErrorCode.BAD_CHUNK, message))
        for path, error in written.failed.items():
            for owner in group.owners(path):
                done.failures[owner.index] = done.failures[owner.index] or error
                if self.tracker.open.get(owner.transfer.request_id) is owner.transfer:
                    await self._reload(owner.transfer)

    async def _reload(self, transfer: Transfer) -> None:
        """After a failed write: what memory holds of the transfer is replaced by the disk's."""
        on_disk: Transfer | None = None
        with contextlib.suppress(Exception):
            on_disk = await asyncio.to_thread(self.spool.read_transfer, transfer.request_id)
        self.tracker.reloaded(transfer.request_id, on_disk, transfer.deadline)
