"""`delta.in` chunks in: admitted one by one, staged in groups, acked once durable.

The app hands `ChunkIntake.receive` every `delta.in` message already waiting (a group). The
tracker admits each in Kafka's order, exactly as if it came alone. What a chunk needs on
disk (its body; its stream's file when the stream changed) is collected, and the group's
files are written together by `TransferStaging.write_group`: each file as durable as
before, their fsyncs side by side, one directory fsync per transfer, where one chunk at a
time paid two fsyncs of its own.

Anything else that touches staging or answers (a chunk that opens a transfer, completes one,
is refused, or evicts another) first flushes what is pending, so seals, answers and
evictions see the disk as the tracker does. A file that cannot be written fails its message
(the app skips it as poison) and its transfer is read again from disk: the files are the
truth. The app acks a group's events only after `receive` returns, so no offset is committed
before its chunk's files are durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from podd_runtime.files import FileWrite
from protocol.codec import decode_delta_in_key
from protocol.errors import ErrorCode, MessageDecodeError
from protocol.messages import DeltaInKey
from replica_agent.errors import FatalAgentError
from replica_agent.tracker import Accepted, Dropped, Rejected
from replica_agent.transfers import Phase, Transfer

if TYPE_CHECKING:
    from replica_agent.service import ReplicaService

log = structlog.get_logger("replica_agent")

#: One `delta.in` message: its raw key and value.
RawMessage = tuple[bytes | None, bytes | None]


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
    """The `delta.in` side of a `ReplicaService`."""

    def __init__(self, service: ReplicaService) -> None:
        self.service = service
        self.tracker = service.tracker
        self.staging = service.staging
        self.metrics = service.metrics

    async def receive(self, messages: Sequence[RawMessage]) -> list[Exception | None]:
        """Handle a group of messages in order. Returns, per message, the unexpected error
        that made it fail (None: handled, whatever the verdict). `FatalAgentError` and
        cancellation propagate."""
        failures: list[Exception | None] = [None] * len(messages)
        pending = _Pending()
        for index, (raw_key, raw_value) in enumerate(messages):
            try:
                await self._one(index, raw_key, raw_value, pending, failures)
            except FatalAgentError:
                raise
            except Exception as exc:
                failures[index] = failures[index] or exc
        await self._flush(pending, failures)
        return failures

    async def _one(
        self,
        index: int,
        raw_key: bytes | None,
        raw_value: bytes | None,
        pending: _Pending,
        failures: list[Exception | None],
    ) -> None:
        try:
            key = decode_delta_in_key(raw_key)
        except MessageDecodeError as exc:
            self.metrics.undecodable.labels("delta.in").inc()
            log.warning("delta.in message skipped: its key cannot be decoded", error=str(exc))
            return
        admission = self.tracker.admit(key, raw_value)
        evicted = self.tracker.take_evicted()
        if evicted:
            await self._flush(pending, failures)
            await self.service.answer_evicted(evicted)
        if isinstance(admission, Dropped):
            self.metrics.dropped.labels(admission.reason).inc()
            if admission.reason == "oversize":
                log.warning(
                    "delta.in message dropped: names too long", requestId=admission.request_id
                )
            return
        if isinstance(admission, Rejected):
            await self._flush(pending, failures)
            await self.service.reject_key(admission)
            return
        await self._stage(index, key, raw_value, admission, pending, failures)

    async def _stage(
        self,
        index: int,
        key: DeltaInKey,
        body: bytes | None,
        accepted: Accepted,
        pending: _Pending,
        failures: list[Exception | None],
    ) -> None:
        transfer = accepted.transfer
        rid = transfer.request_id
        try:
            if accepted.opened:
                transfer.first_seen = time.perf_counter()
                await asyncio.to_thread(self.staging.open_transfer, transfer)
                transfer.arm(self.service.clock() + self.service.incomplete_timeout)
                self.metrics.open_transfers.set(len(self.tracker.open))
                log.info(
                    "first chunk", **transfer.log_ids(), streamTotal=transfer.stream_total,
                    subscription=transfer.subscription[:200],
                )  # fmt: skip
            stream = transfer.streams[key.stream_number]
            if accepted.new:
                path = self.staging.chunk_path(rid, key.stream_number, key.chunk_number)
                pending.add_body(_Owner(index, transfer), key.stream_number, (path, body or b""))
                self.metrics.chunks.labels(transfer.datamart).inc()
                if transfer.phase is Phase.REPORTED_INCOMPLETE:  # answered incomplete: re-arm
                    transfer.arm(self.service.clock() + self.service.incomplete_timeout)
            else:
                self.metrics.duplicates.labels(transfer.datamart).inc()
            if accepted.stream_changed:
                file = self.staging.stream_file(rid, key.stream_number, stream)
                pending.add_stream(_Owner(index, transfer), file)
        except Exception:
            await self._flush(pending, failures)  # what is pending is on disk before reading
            await asyncio.to_thread(self._reload, transfer)
            raise
        except BaseException:
            await asyncio.to_thread(self._reload, transfer)
            raise
        if accepted.completed:
            await self._flush(pending, failures)
            if failures[index] is None and self.tracker.open.get(rid) is transfer:
                await self.service.complete(transfer)

    async def _flush(self, pending: _Pending, failures: list[Exception | None]) -> None:
        """Write what is pending. A body beyond the limits gets its transfer refused
        (BAD_CHUNK); a file that could not be written fails its message, and its transfer
        is read again from disk."""
        group = pending.take()
        if not group.bodies and not group.streams:
            return
        done = await asyncio.to_thread(
            self.staging.write_group,
            [(path, data) for path, (data, _, _) in group.bodies.items()],
            [(path, data) for path, (data, _) in group.streams.items()],
        )
        self.metrics.staging_writes.inc()
        for path, size in done.sizes.items():
            _, owner, number = group.bodies[path]
            counted = owner.transfer.streams[number]
            if counted.decoded_bytes is not None:
                counted.decoded_bytes += size
        for path, refused in done.refused.items():
            transfer = group.bodies[path][1].transfer
            if self.tracker.open.get(transfer.request_id) is transfer:
                message = f"the body is refused: {refused}"
                await self.service.reject(transfer, ErrorCode.BAD_CHUNK, message)
        for path, error in done.failed.items():
            for owner in group.owners(path):
                failures[owner.index] = failures[owner.index] or error
                if self.tracker.open.get(owner.transfer.request_id) is owner.transfer:
                    await asyncio.to_thread(self._reload, owner.transfer)

    def _reload(self, transfer: Transfer) -> None:
        """After a failed write: forget what memory holds of the transfer, re-read the disk."""
        self.tracker.open.pop(transfer.request_id, None)
        with contextlib.suppress(Exception):
            recovered = self.staging.read_transfer(transfer.request_id)
            recovered.arm(transfer.deadline)
            self.tracker.restore(recovered)
