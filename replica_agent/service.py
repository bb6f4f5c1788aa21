"""The replica service: the agent's rooms wired together. Asyncio, but no Faust.

    delta.in  → ChunkIntake (chunks → durable files → outcomes)
              → PrestageQueue (complete streams of a transfer still arriving → spool)
              → LoadWorker (sealed transfers → the loader, one at a time)
    every delta.in.rs → Outbox (recorded, sent, settled)
    delta.rq  → StateDesk (→ delta.rs)

The intake answers nothing: the service hands its outcomes on (a completed transfer to the
worker, a refused or evicted one to the outbox). `start` recovers from what survives a
`kill -9` (`replica_agent.recovery`), before the first chunk is consumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from protocol.codec import decode_delta_in_key
from protocol.errors import MessageDecodeError
from protocol.messages import DeltaState
from replica_agent.answer_records import AnswerRecords
from replica_agent.backpressure import Backpressure, is_disk_fault
from replica_agent.chunk_spool import ChunkSpool
from replica_agent.intake import (
    ChunkIntake,
    Completed,
    Evicted,
    Outcome,
    RawMessage,
    Refused,
    Replayed,
    StreamsReady,
)
from replica_agent.load_worker import Loader, LoadWorker, Registry, RegistryReads
from replica_agent.metrics import AgentMetrics
from replica_agent.outbox import Outbox, SendResult
from replica_agent.prestage_queue import Prestager
from replica_agent.recovery import recover
from replica_agent.state_desk import StateDesk
from replica_agent.tracker import TransferTracker

__all__ = ["ReplicaService", "SendResult"]

log = structlog.get_logger("replica_agent")

#: What intake waits on while the disk refuses writes (`/health` names it).
STAGING = "staging a chunk"
#: Errors that say the staging disk is full (a transfer may be evicted to make room).
FULL_DISK = frozenset({errno.ENOSPC, errno.EDQUOT})


class ReplicaService:
    def __init__(
        self,
        *,
        tracker: TransferTracker,
        spool: ChunkSpool,
        loader: Loader,
        registry: Registry,
        send_result: SendResult,
        metrics: AgentMetrics,
        incomplete_timeout: float,
        clock: Callable[[], float] = time.monotonic,
        crash_after_commit_of: int | None = None,
        registry_tail: RegistryReads | None = None,
        prestager: Prestager | None = None,
        prestage_min_bytes: int = 1,
        prestage_piece_bytes: int = 0,
        prestage_eager_bytes: int = 0,
        state_answers_per_second: float = 100.0,
    ) -> None:
        self.tracker = tracker
        self.spool = spool
        self.metrics = metrics
        self.incomplete_timeout = incomplete_timeout
        self.clock = clock
        self.records = AnswerRecords(
            spool.outbox, spool.quarantine, keep_finished=tracker.limits.max_finished
        )
        #: Whether the agent waits for its disk (intake and answers alike).
        self.pause = Backpressure()
        self.outbox = Outbox(
            records=self.records,
            send_result=send_result,
            tracker=tracker,
            spool=spool,
            metrics=metrics,
            pause=self.pause,
        )
        self.worker = LoadWorker(
            tracker=tracker,
            loader=loader,
            registry=registry,
            outbox=self.outbox,
            metrics=metrics,
            crash_after_commit_of=crash_after_commit_of,
            registry_tail=registry_tail,
            prestager=prestager,
        )
        self.intake = ChunkIntake(
            tracker,
            spool,
            metrics,
            incomplete_timeout=incomplete_timeout,
            clock=clock,
            prestage_min_bytes=prestage_min_bytes,
            prestage_piece_bytes=prestage_piece_bytes,
            prestage_eager_bytes=prestage_eager_bytes,
            prestage_idle=self.worker.prestage_queue.idle,
        )
        self.desk = StateDesk(tracker, self.worker, self.outbox, metrics, state_answers_per_second)
        #: Set once `start` has recovered; chunks are not consumed before.
        self.ready = asyncio.Event()
        for name in tracker.schemas:
            last = tracker.last_applied(name)
            metrics.serving(name, None if last is None else last.delta_num)
        metrics.watch_staging(
            tracker.staged_bytes, tracker.limits.max_staged_bytes, lambda: bool(self.pause.reason)
        )

    # --- life ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Recover (`replica_agent.recovery`), then start the load worker."""
        await recover(
            records=self.records,
            spool=self.spool,
            tracker=self.tracker,
            intake=self.intake,
            outbox=self.outbox,
            worker=self.worker,
            metrics=self.metrics,
            deadline=self.clock() + self.incomplete_timeout,
        )
        self.worker.start()

    async def stop(self) -> None:
        await self.worker.stop()

    @property
    def fatal(self) -> BaseException | None:
        return self.worker.fatal

    def health(self) -> dict[str, Any]:
        """Liveness for `/health` and `replica-agent status`."""
        return {
            "worker_alive": self.worker.alive,
            "last_progress": self.worker.last_progress,
            "queued_loads": self.worker.queued,
            "open_transfers": len(self.tracker.open),
            "staged_bytes": self.tracker.staged_bytes(),
            "paused": self.pause.reason,
            "load_seconds": self.worker.load_seconds(),
        }

    # --- the topics ------------------------------------------------------------------------
    async def receive(self, messages: Sequence[RawMessage]) -> list[Exception | None]:
        """A group of `delta.in` messages, in order (see `ChunkIntake.receive`); per message,
        the unexpected error that made it fail. Messages that failed on a disk fault are
        handled again, with backoff, until the disk takes them (`backpressure`): this
        returns only then, so nothing after them is acked meanwhile."""
        failures: list[Exception | None] = [None] * len(messages)
        pending = list(range(len(messages)))
        attempt = 0
        while True:
            received = await self.intake.receive([messages[i] for i in pending])
            await self._handle(received.outcomes)
            again, disk_error = [], None
            for index, failure in zip(pending, received.failures, strict=True):
                if is_disk_fault(failure):
                    again.append(index)
                    disk_error = disk_error or failure
                else:
                    failures[index] = failure
            if disk_error is None:
                self.pause.resumed(STAGING)
                return failures
            pending = again
            if await self._evict_for_disk(disk_error, [messages[i] for i in again]):
                continue  # room made: the same messages again, at once
            await self.pause.wait(attempt, STAGING, disk_error)
            attempt += 1

    async def _evict_for_disk(self, error: Exception, refused: Sequence[RawMessage]) -> bool:
        """A full disk: the transfer least far along, other than those of the refused
        chunks, is evicted (answered INCOMPLETE_DELTA, its files removed) instead of
        waiting for a person; True if one was."""
        if not (isinstance(error, OSError) and error.errno in FULL_DISK):
            return False
        keep = set()
        for key, _ in refused:
            with contextlib.suppress(MessageDecodeError):
                keep.add(decode_delta_in_key(key).request_id)
        victim = self.tracker.evict_for_disk(keep)
        if victim is None:
            return False
        chunks = victim.chunks_received
        log.warning(
            "the staging disk is full: removing a transfer", **victim.log_ids(), chunks=chunks
        )
        await self.outbox.evicted(victim)
        return True

    async def _handle(self, outcomes: Sequence[Outcome]) -> None:
        for outcome in outcomes:
            if isinstance(outcome, Completed):
                self.worker.submit(outcome.transfer, outcome.staged)
            elif isinstance(outcome, Refused):
                await self.outbox.refuse(outcome.framing, outcome.code, outcome.message)
            elif isinstance(outcome, Evicted):
                await self.outbox.evicted(outcome.transfer)
            elif isinstance(outcome, StreamsReady):
                self.worker.prestage_queue.offer(outcome.transfer, outcome.staged)
            elif isinstance(outcome, Replayed):
                await self.worker.answer_replayed(outcome.transfer)

    async def check_incomplete(self) -> None:
        await self.outbox.report_overdue(self.clock())

    async def on_delta_rq(self, raw_value: bytes | None) -> DeltaState | None:
        return await self.desk.on_delta_rq(raw_value)

    async def refresh_registries(self, every: float) -> None:
        """Every datamart's registry read again if not within `every` seconds (see
        `LoadWorker.refresh_registry`): metrics and the status file follow the database."""
        for name in self.tracker.schemas:
            await self.worker.refresh_registry(name, min_interval=every)

    def datamarts(self) -> dict[str, dict[str, Any]]:
        """Each datamart's loading transfer, failed flag and last error (the status file)."""
        out = {}
        for name in self.tracker.schemas:
            loading = self.tracker.loading(name)
            error = self.outbox.last_errors.get(name)
            out[name] = {
                "loading": None if loading is None else loading.request_id,
                "failed": name in self.worker.failed,
                "last_error": None
                if error is None
                else {"code": error.code, "message": error.message, "requestId": error.request_id},
            }
        return out
