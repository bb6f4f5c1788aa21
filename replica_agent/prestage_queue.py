"""Streams complete while their transfer still arrives, staged meanwhile (the loader's
`Prestager`), one hand-over at a time in a thread, so the load after the last chunk has
less left to do.

A hand-over is staged only while it can help and cannot hinder: its transfer still
receives, its delta is the one its datamart expects next, and the load worker is idle (a
load owns the staging tables; the prestage would wait on, or be undone by, it). The worker
waits for the prestage in flight before each load (`settle`), and hand-overs still queued
then are dropped: the load stages those tables itself. A prestage that fails changes
nothing a load does (see `spark_loader.prestage`), so nothing here is ever answered.

Prestaged tables are also applied, in the delta's transaction opened at its first prestage
(`replica_store.open_apply`), kept here per transfer: `settle` hands it to the load of that
transfer and rolls back any other, and `sweep` (every second) rolls back the one of a
transfer that was refused, evicted or answered INCOMPLETE_DELTA, so no transaction and no
datamart lock outlives what it was opened for.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Protocol

import structlog

from replica_agent.tracker import TransferTracker
from replica_agent.transfers import Phase, Transfer
from replica_store.open_apply import OpenApply
from replica_store.transfer import StagedTransfer, StreamManifest

log = structlog.get_logger("replica_agent")


class Prestager(Protocol):
    """The loader's prestager (`spark_loader.prestage.Prestager`)."""

    @property
    def merge_max_bytes(self) -> int:
        """Hand-overs of one transfer waiting together are merged into one prestage up to
        this many decoded bytes: what the prestager stages in its own process."""
        ...

    def prestage(
        self, transfer: StagedTransfer, opened: OpenApply | None
    ) -> tuple[list[str], OpenApply | None]:
        """Stage (and apply, in the open apply given or a new one) complete streams of a
        transfer still receiving: the tables staged, and the open apply (None: none)."""
        ...


def _decoded(staged: StagedTransfer) -> int:
    return sum(s.decoded_bytes or 0 for s in staged.manifest.streams)


def _joined(earlier: StreamManifest | None, later: StreamManifest) -> StreamManifest:
    """Two hand-overs of one stream as one: pieces offered one after the other (chunks
    a..b, then b+1..c) make the piece a..c, whole if c is the stream's last chunk."""
    if earlier is None:
        return later
    decoded = None
    if earlier.decoded_bytes is not None and later.decoded_bytes is not None:
        decoded = earlier.decoded_bytes + later.decoded_bytes
    chunks = earlier.chunks.joined(later.chunks)
    return StreamManifest.of(later.stream_number, later.table_name, chunks, decoded)


class PrestageQueue:
    def __init__(
        self, tracker: TransferTracker, prestager: Prestager | None, worker_idle: Callable[[], bool]
    ) -> None:
        self.tracker = tracker
        self.prestager = prestager
        self.worker_idle = worker_idle
        self._pending: list[tuple[Transfer, StagedTransfer]] = []
        self._task: asyncio.Task[None] | None = None
        #: The open apply of each transfer that has one (by requestId).
        self._opened: dict[str, OpenApply] = {}

    def idle(self) -> bool:
        """Nothing is being prestaged or waits to be, and no open apply still applies what
        was: pieces offered now are taken at once, not piled up behind work in flight."""
        if self._pending or (self._task is not None and not self._task.done()):
            return False
        return not any(opened.applying() for opened in self._opened.values())

    def offer(self, transfer: Transfer, staged: StagedTransfer) -> None:
        """Complete streams of `transfer` (`staged` names them), staged in turn if useful."""
        if self.prestager is None:
            return
        self._pending.append((transfer, staged))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="podd-prestage")

    async def settle(self, transfer: Transfer) -> OpenApply | None:
        """Before a load: the prestage in flight ends, those still queued are dropped, and
        the open apply of `transfer` is handed over (any other is rolled back)."""
        self._pending.clear()
        await self._idle()
        mine = self._opened.pop(transfer.request_id, None)
        await self._abort(list(self._opened))
        return mine

    async def sweep(self) -> None:
        """Roll back the open applies of transfers no longer receiving towards a load."""
        if self._task is not None and not self._task.done():
            return  # a prestage uses them: the next sweep
        stale = [
            rid
            for rid in self._opened
            if (t := self.tracker.open.get(rid)) is None or t.phase is Phase.REPORTED_INCOMPLETE
        ]
        await self._abort(stale)

    async def stop(self) -> None:
        self._pending.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._abort(list(self._opened))

    async def _idle(self) -> None:
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    async def _abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            opened = self._opened.pop(rid, None)
            if opened is not None:
                log.info("open apply rolled back", requestId=rid)
                await asyncio.to_thread(opened.abort)

    def _useful(self, transfer: Transfer) -> bool:
        return (
            self.tracker.open.get(transfer.request_id) is transfer
            and transfer.evictable
            and self.worker_idle()
            and self.tracker.sequence_problem(
                transfer.datamart, transfer.delta_num, transfer.delta_date
            )
            is None
        )

    def _take(self) -> tuple[Transfer, StagedTransfer]:
        """The first hand-over, with later ones of the same transfer while they decode to at
        most the prestager's `merge_max_bytes` together: one prestage for the small streams
        that completed while the last prestage ran, not one per stream."""
        assert self.prestager is not None
        bound = self.prestager.merge_max_bytes
        transfer, staged = self._pending.pop(0)
        size, same, rest = _decoded(staged), list[StagedTransfer](), []
        held: set[int] = set()  # streams of hand-overs left out: their later pieces wait too
        for other, part in self._pending:
            numbers = {s.stream_number for s in part.manifest.streams}
            fits = size + _decoded(part) <= bound and not numbers & held
            if other is transfer and fits:
                size += _decoded(part)
                same.append(part)
            else:
                held |= numbers if other is transfer else set()
                rest.append((other, part))
        self._pending = rest
        if not same:
            return transfer, staged
        streams: dict[int, StreamManifest] = {}
        for part in (staged, *same):
            for stream in part.manifest.streams:
                streams[stream.stream_number] = _joined(streams.get(stream.stream_number), stream)
        manifest = staged.manifest.model_copy(
            update={"streams": tuple(streams[n] for n in sorted(streams))}
        )
        return transfer, StagedTransfer(staged.directory, manifest)

    async def _run(self) -> None:
        prestager = self.prestager
        assert prestager is not None
        while self._pending:
            transfer, staged = self._take()
            if not self._useful(transfer):
                continue
            rid = transfer.request_id
            try:
                opened_before = self._opened.pop(rid, None)
                _, opened = await asyncio.to_thread(prestager.prestage, staged, opened_before)
            except Exception:  # the loader's prestage logs and drops its own failures
                log.exception("prestage failed", **transfer.log_ids())
                continue
            if opened is not None:
                self._opened[rid] = opened
