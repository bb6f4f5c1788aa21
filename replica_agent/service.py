"""The replica service: decoded messages in, answers out. Asyncio, but no Faust.

Chunks go through `ChunkIntake` (replica_agent.intake), in groups: each key bounded and
decoded, admitted by the tracker, measured and staged (in threads: fsync must not stall
`delta.rq`), and a complete transfer acted on.
Loads run one at a time in a worker task, each in a thread, so the event loop keeps
answering while Spark works.

Every final answer goes through the outbox: recorded durably (once: a transfer never gets
two different answers), sent, then settled (marked sent and the transfer's files removed).
A restart resends what is owed, so an answer is delivered at least once.

The worker is supervised: an unexpected error while handling a transfer answers it
(`LOAD_FAILED`, or `OK` if the registry shows its delta applied), is logged, and the worker
goes on. If the worker itself ends, `fatal` is set and the agent exits non-zero, so its
supervisor restarts it and it recovers from staging and the registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import structlog

from protocol.codec import decode_message
from protocol.errors import ErrorCode, MessageDecodeError, ProtocolError
from protocol.gaps import incomplete_message
from protocol.messages import DeltaInResult, DeltaRequest, DeltaState
from replica_agent.answers import (
    DatamartStatus,
    error_result,
    replica_state,
    result_from_registry,
)
from replica_agent.errors import FatalAgentError
from replica_agent.intake import ChunkIntake, RawMessage
from replica_agent.metrics import AgentMetrics
from replica_agent.staging import TransferStaging
from replica_agent.tracker import Rejected, TransferTracker
from replica_agent.transfers import Phase, Transfer
from spark_loader.errors import CommitStateUnknownError
from spark_loader.store import RegistryEntry
from spark_loader.transfer import StagedTransfer

log = structlog.get_logger("replica_agent")


class Loader(Protocol):
    """What the service needs of `spark_loader.loader.DeltaLoader`."""

    def load(self, transfer: StagedTransfer) -> RegistryEntry: ...


#: The exit code of an injected crash.
CRASH_EXIT = 86


SendResult = Callable[[DeltaInResult], Awaitable[None]]


class ReplicaService:
    def __init__(
        self,
        *,
        tracker: TransferTracker,
        staging: TransferStaging,
        loader: Loader,
        registry: Callable[[str, int], RegistryEntry | None],
        send_result: SendResult,
        metrics: AgentMetrics,
        incomplete_timeout: float,
        clock: Callable[[], float] = time.monotonic,
        crash_after_commit_of: int | None = None,
    ) -> None:
        self.tracker = tracker
        self.staging = staging
        self.loader = loader
        self.registry = registry
        self.send_result = send_result
        self.metrics = metrics
        self.incomplete_timeout = incomplete_timeout
        self.clock = clock
        #: Fault injection for the crash tests: die between this delta's commit and its answer.
        self.crash_after_commit_of = crash_after_commit_of
        self.status = {name: DatamartStatus() for name in tracker.schemas}
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self.fatal: BaseException | None = None
        #: When the load worker last finished handling a transfer (or started).
        self.last_progress = time.time()
        #: Set once `start` has recovered; chunks are not consumed before.
        self.ready = asyncio.Event()
        self.intake = ChunkIntake(self)
        for name in tracker.schemas:
            last = tracker.last_applied(name)
            if last is not None:
                metrics.current_delta.labels(name).set(last.delta_num)

    # --- life ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Recover from staging: resend owed answers, reopen transfers, finish complete ones."""
        found = await asyncio.to_thread(self.staging.recover)
        for where, why in found.quarantined:
            self.metrics.quarantined.inc()
            log.error("unreadable staged state moved to quarantine", path=str(where), error=why)
        self.tracker.remember_finished(found.finished)
        for result in found.owed:
            log.info("resending an owed answer", requestId=result.request_id)
            await self._deliver(result)
        for transfer in found.open:
            if transfer.datamart not in self.tracker.schemas:
                directory = self.staging.directory(transfer.request_id)
                why = f"transfer of datamart {transfer.datamart!r}, which is no longer served"
                where = await asyncio.to_thread(self.staging.quarantine, directory, why)
                self.metrics.quarantined.inc()
                log.error("staged transfer moved to quarantine", path=str(where), error=why)
                continue
            self.tracker.restore(transfer)
            transfer.arm(self.clock() + self.incomplete_timeout)
            log.info(
                "transfer recovered from staging",
                **transfer.log_ids(),
                chunks=transfer.chunks_received,
                complete=transfer.complete,
            )
            if transfer.complete:
                await self.complete(transfer)
        for name in self.tracker.schemas:
            await self._close_superseded(name)
        self.metrics.open_transfers.set(len(self.tracker.open))
        self._worker = asyncio.create_task(self._load_worker(), name="podd-loads")
        self._worker.add_done_callback(self._worker_ended)

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker

    def _worker_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self.fatal is not None:
            return
        error = task.exception()
        self.fatal = error or FatalAgentError("the load worker ended")
        log.critical("the load worker ended", error=repr(self.fatal))

    def health(self) -> dict[str, Any]:
        """Liveness for `/health` and `replica-agent status`."""
        alive = self._worker is not None and not self._worker.done() and self.fatal is None
        return {
            "worker_alive": alive,
            "last_progress": self.last_progress,
            "queued_loads": self._queue.qsize(),
            "open_transfers": len(self.tracker.open),
            "staged_bytes": self.tracker.staged_bytes(),
        }

    # --- delta.in --------------------------------------------------------------------------
    async def receive(self, messages: Sequence[RawMessage]) -> list[Exception | None]:
        """A group of `delta.in` messages, in order (see `ChunkIntake.receive`)."""
        return await self.intake.receive(messages)

    async def complete(self, transfer: Transfer) -> None:
        await asyncio.to_thread(self.staging.seal, transfer)
        transfer.phase = Phase.SEALED
        log.info(
            "complete", **transfer.log_ids(), chunks=transfer.chunks_received,
            seconds=_since_first(transfer),
        )  # fmt: skip
        await self._act_on(transfer, queue_load=True)

    async def _act_on(self, transfer: Transfer, *, queue_load: bool) -> bool:
        """Answer a transfer if it needs no load; True when it must be loaded."""
        decision = self.tracker.decide(transfer)
        if decision.action == "reject":
            await self.reject(transfer, decision.code or ErrorCode.BAD_CHUNK, decision.message)
        elif decision.action == "answer-stored":
            entry = await self._applied(transfer)
            if entry is None:  # the registry lost a delta the tracker saw: never expected
                raise FatalAgentError(f"delta {transfer.delta_num} vanished from the registry")
            log.info("already applied: answering the stored result", **transfer.log_ids())
            await self._answer(result_from_registry(transfer, entry))
        else:
            if queue_load:
                self._queue.put_nowait(transfer.request_id)
            return True
        return False

    async def _close_superseded(self, datamart: str) -> None:
        """Transfers still receiving a delta that is now applied: answered as if complete."""
        for transfer in self.tracker.superseded(datamart):
            log.info("delta applied under another requestId: closing", **transfer.log_ids())
            await self._act_on(transfer, queue_load=False)

    async def answer_evicted(self, evicted: list[Transfer]) -> None:
        for transfer in evicted:
            message = (
                f"{incomplete_message(transfer.gaps(), self.tracker.limits.max_missing_items)}; "
                "removed to keep the replica's staging budget (open transfers or bytes): "
                "send the delta again"
            )
            self._record_error(transfer, ErrorCode.INCOMPLETE_DELTA, message, event="evicted")
            await self._answer(error_result(transfer, ErrorCode.INCOMPLETE_DELTA, message))

    # --- loads -----------------------------------------------------------------------------
    async def _load_worker(self) -> None:
        while True:
            rid = await self._queue.get()
            transfer = self.tracker.open.get(rid)
            try:
                if transfer is not None and await self._act_on(transfer, queue_load=False):
                    await self._load(transfer)
            except FatalAgentError as exc:
                self.fatal = exc
                log.critical("agent stopping", error=str(exc))
                return
            except Exception:
                log.exception("a transfer could not be handled", requestId=rid)
                if transfer is not None:
                    await self._settle_after_fault(transfer)
            self.last_progress = time.time()

    async def _applied(self, transfer: Transfer) -> RegistryEntry | None:
        """The registry's entry of the transfer's delta with its date. If the registry
        cannot be read (with backoff, about 30 s), nothing may be answered: the agent
        restarts (FatalAgentError) and recovers from staging and the registry."""
        for delay in (0.5, 1, 2, 4, 8, 16, 0):
            try:
                entry = await asyncio.to_thread(
                    self.registry, transfer.datamart, transfer.delta_num
                )
                break
            except Exception as exc:
                if not delay:
                    raise FatalAgentError(f"the registry cannot be read: {exc!r}") from exc
                log.warning("the registry cannot be read; trying again", error=repr(exc)[:300])
                await asyncio.sleep(delay)
        return entry if entry is not None and entry.delta_date == transfer.delta_date else None

    async def _settle_after_fault(self, transfer: Transfer) -> None:
        """An unexpected error: OK if the registry shows the delta applied, else LOAD_FAILED.
        If even that cannot be done, the agent must restart (FatalAgentError)."""
        try:
            entry = await self._applied(transfer)
            if entry is not None:
                self.tracker.record_applied(transfer.datamart, entry.delta_num, entry.delta_date)
                await self._answer(result_from_registry(transfer, entry))
                return
            self.status[transfer.datamart].failed = True
            await self.reject(transfer, ErrorCode.LOAD_FAILED, _internal_error())
        except Exception as exc:
            raise FatalAgentError(
                f"a transfer could not be answered after a fault: {exc!r}"
            ) from exc

    async def _load(self, transfer: Transfer) -> None:
        status = self.status[transfer.datamart]
        staged = await asyncio.to_thread(self.staging.sealed, transfer.request_id)
        if staged is None:
            raise FatalAgentError(f"transfer {transfer.request_id} was sealed, but not on disk")
        transfer.phase = Phase.LOADING
        started = time.perf_counter()
        log.info("load start", **transfer.log_ids())
        failure: tuple[ErrorCode, str] | None = None
        try:
            entry = await asyncio.to_thread(self.loader.load, staged)
        except ProtocolError as exc:
            failure = exc.code, exc.message
        except CommitStateUnknownError as exc:
            raise FatalAgentError(f"delta {transfer.delta_num}: {exc}") from exc
        except Exception:  # a bug or an environment fault: report, keep the replica
            log.exception("load failed unexpectedly", **transfer.log_ids())
            failure = ErrorCode.LOAD_FAILED, _internal_error()
        finally:
            transfer.phase = Phase.SEALED
        if failure is not None and failure[0] is ErrorCode.LOAD_FAILED:
            applied = await self._applied(transfer)  # never LOAD_FAILED for an applied delta
            if applied is not None:
                entry, failure = applied, None
        if failure is not None:
            status.failed = failure[0] is ErrorCode.LOAD_FAILED
            await self.reject(transfer, *failure)
            return
        if self.crash_after_commit_of == entry.delta_num:
            log.warning("fault injection: exiting after the commit, before the answer")
            os._exit(CRASH_EXIT)
        seconds = time.perf_counter() - started
        status.failed = False
        self.tracker.record_applied(transfer.datamart, entry.delta_num, entry.delta_date)
        self.metrics.count_applied(transfer.datamart, entry, seconds)
        log.info(
            "applied",
            **transfer.log_ids(),
            seconds=round(seconds, 3),
            tables={c.table_name: [c.rows_received, c.rows_upserted, c.rows_deleted]
                    for c in entry.tables},
        )  # fmt: skip
        await self._answer(result_from_registry(transfer, entry))
        await self._close_superseded(transfer.datamart)

    # --- answers ---------------------------------------------------------------------------
    async def reject_key(self, rejected: Rejected) -> None:
        # The transfer's own framing (from its first chunk) when it has one.
        transfer = rejected.transfer or Transfer.opened_by(rejected.key)
        await self.reject(transfer, rejected.code, rejected.message)

    async def reject(self, transfer: Transfer, code: ErrorCode, message: str) -> None:
        self._record_error(transfer, code, message)
        await self._answer(error_result(transfer, code, message))

    def _record_error(
        self, transfer: Transfer, code: ErrorCode, message: str, *, event: str = "rejected"
    ) -> None:
        """Count and log an ERROR answer; it becomes its datamart's last error."""
        served = transfer.datamart in self.status
        if served:
            self.status[transfer.datamart].last_error = (code.value, message, transfer.request_id)
        self.metrics.rejections.labels(transfer.datamart if served else "", code.value).inc()
        log.warning(event, **transfer.log_ids(), errorCode=code.value, errorMessage=message[:2000])

    async def _answer(self, result: DeltaInResult) -> None:
        """The transfer's final answer: recorded once, then delivered."""
        self.tracker.finish(result.request_id)
        recorded = await asyncio.to_thread(self.staging.owe, result)
        if recorded != result:
            log.warning("the transfer was answered before: resending that answer",
                        requestId=result.request_id)  # fmt: skip
        await self._deliver(recorded)

    async def _deliver(self, result: DeltaInResult) -> None:
        await self.send_result(result)
        transfer = self.tracker.finish(result.request_id)
        await asyncio.to_thread(self.staging.settle, result.request_id)
        self.metrics.open_transfers.set(len(self.tracker.open))
        log.info(
            "answered", requestId=result.request_id, datamart=result.datamart,
            deltaNum=result.delta_num, status=result.status.value, errorCode=result.error_code,
            seconds=None if transfer is None else _since_first(transfer),
        )  # fmt: skip

    async def check_incomplete(self) -> None:
        """Answer INCOMPLETE_DELTA for transfers past their deadline; they stay open."""
        for transfer in self.tracker.overdue(self.clock()):
            transfer.phase = Phase.REPORTED_INCOMPLETE  # re-armed by the next new chunk
            message = incomplete_message(transfer.gaps(), self.tracker.limits.max_missing_items)
            self._record_error(transfer, ErrorCode.INCOMPLETE_DELTA, message, event="incomplete")
            # Not through the outbox: the transfer stays open, and a restart re-arms it.
            await self.send_result(error_result(transfer, ErrorCode.INCOMPLETE_DELTA, message))

    # --- delta.rq --------------------------------------------------------------------------
    def on_delta_rq(self, raw_value: bytes | None) -> DeltaState | None:
        try:
            request = decode_message(DeltaRequest, raw_value)
        except MessageDecodeError as exc:
            self.metrics.undecodable.labels("delta.rq").inc()
            log.warning("delta.rq message skipped: it cannot be decoded", error=str(exc)[:500])
            return None
        most = self.tracker.limits.max_name_chars
        if max(len(request.request_id), len(request.datamart)) > most:
            self.metrics.dropped.labels("oversize").inc()
            log.warning("delta.rq message dropped: names too long")
            return None
        return self.state_of(request.request_id, request.datamart)

    def state_of(self, request_id: str, datamart: str) -> DeltaState:
        return replica_state(request_id, datamart, self.tracker, self.status.get(datamart))


def _internal_error() -> str:
    """What the origin is told of an unexpected fault: a reference, never the fault's text
    (it may name hosts, paths or settings)."""
    reference = uuid.uuid4().hex[:12]
    log.error("internal error reference", reference=reference)
    return f"the replica failed internally (reference {reference} in its log); retry later"


def _since_first(transfer: Transfer) -> float | None:
    """Seconds since the transfer's first chunk in this run (None if it came before)."""
    first = transfer.first_seen
    return None if first is None else round(time.perf_counter() - first, 3)
