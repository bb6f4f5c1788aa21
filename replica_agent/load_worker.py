"""The load worker: sealed transfers are loaded one at a time, in a thread, and answered.

It owns the load queue (each entry the `StagedTransfer` that sealing returned), the loader's
calls and the registry's reads. Before a load it asks the tracker what to do with the
transfer (`TransferTracker.decide`, once per transfer); the loader checks the sequence again
under the datamart's lock, and its verdict is the authority.

It is supervised: an unexpected error while handling a transfer answers it (`LOAD_FAILED`,
or `OK` if the registry shows its delta applied), is logged, and the worker goes on. If the
worker itself ends, `fatal` is set and the agent exits non-zero, so its supervisor restarts
it and it recovers from staging and the registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Callable
from typing import Protocol

import structlog

from podd_runtime.backoff import Backoff, retry_async
from protocol.errors import ErrorCode, ProtocolError
from protocol.exit_codes import ExitCode
from protocol.gaps import Gap, removed_message
from protocol.sequence import AppliedDelta, check_sequence
from replica_agent.answers import result_from_registry
from replica_agent.applied_window import AppliedWindow
from replica_agent.errors import FatalAgentError
from replica_agent.metrics import AgentMetrics
from replica_agent.outbox import Outbox
from replica_agent.prestage_queue import PrestageQueue, Prestager
from replica_agent.tracker import TransferTracker
from replica_agent.transfers import Transfer
from replica_store.errors import CommitStateUnknownError
from replica_store.open_apply import OpenApply
from replica_store.registry import RegistryEntry
from replica_store.transfer import StagedTransfer

log = structlog.get_logger("replica_agent")

#: The registry's reads before an answer: 7 attempts, waits of 0.5 s doubling between them
#: (about 30 s in all), then the agent restarts.
REGISTRY_BACKOFF = Backoff(0.5)
REGISTRY_ATTEMPTS = 7


class Loader(Protocol):
    """What the worker needs of `spark_loader.loader.DeltaLoader`."""

    def load(self, transfer: StagedTransfer, opened: OpenApply | None = None) -> RegistryEntry: ...


Registry = Callable[[str, int], RegistryEntry | None]


class RegistryReads(Protocol):
    """What the worker reads of the registry's end (`replica_store.registry_tail`)."""

    def last(self, datamart: str) -> AppliedDelta | None: ...

    def tail(self, datamart: str, count: int) -> list[AppliedDelta]: ...


class LoadWorker:
    def __init__(
        self,
        *,
        tracker: TransferTracker,
        loader: Loader,
        registry: Registry,
        outbox: Outbox,
        metrics: AgentMetrics,
        crash_after_commit_of: int | None = None,
        registry_tail: RegistryReads | None = None,
        prestager: Prestager | None = None,
    ) -> None:
        self.tracker = tracker
        self.prestage_queue = PrestageQueue(tracker, prestager, self.idle)
        #: Re-read when the loader's sequence check (the authority) disagrees with memory,
        #: and before a `delta.rs`.
        self.registry_tail = registry_tail
        self.loader = loader
        self.registry = registry
        self.outbox = outbox
        self.metrics = metrics
        #: Fault injection for the crash tests: die between this delta's commit and its answer.
        self.crash_after_commit_of = crash_after_commit_of
        #: Datamarts whose last load ended LOAD_FAILED.
        self.failed: set[str] = set()
        self.fatal: BaseException | None = None
        #: When the worker last finished handling a transfer (or started).
        self.last_progress = time.time()
        #: When the load in progress began (None: none is).
        self._load_began: float | None = None
        self._queue: asyncio.Queue[tuple[Transfer, StagedTransfer]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        #: Transfers taken from the queue so far, and whether one is being handled: a
        #: registry read taken while either moved may be older than memory.
        self._taken = 0
        self._handling = False
        #: When each datamart's registry was last read for `refresh_registry`.
        self._refreshed: dict[str, float] = {}

    # --- life ------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="podd-loads")
        self._task.add_done_callback(self._ended)

    async def stop(self) -> None:
        await self.prestage_queue.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done() and self.fatal is None

    def idle(self) -> bool:
        """No transfer is being handled or waits for the worker."""
        return not self._handling and self._queue.empty()

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self.fatal is not None:
            return
        error = task.exception()
        self.fatal = error or FatalAgentError("the load worker ended")
        log.critical("the load worker ended", error=repr(self.fatal))

    # --- work ------------------------------------------------------------------------------
    def submit(self, transfer: Transfer, staged: StagedTransfer) -> None:
        """A sealed transfer, for the worker to decide on and load in turn."""
        self._queue.put_nowait((transfer, staged))

    async def close_superseded(self, datamart: str) -> None:
        """Transfers still receiving a delta that is now applied: answered as if complete."""
        for transfer in self.tracker.superseded(datamart):
            log.info("delta applied under another requestId: closing", **transfer.log_ids())
            await self._answer_unless_load(transfer)

    async def _run(self) -> None:
        while True:
            transfer, staged = await self._queue.get()
            self._taken += 1
            self._handling = True
            try:
                # Its tables are the load's now; an apply opened for it is finished there.
                opened = await self.prestage_queue.settle(transfer)
                if self.tracker.open.get(transfer.request_id) is transfer and (
                    await self._answer_unless_load(transfer)
                ):
                    await self._load(transfer, staged, opened)
                elif opened is not None:
                    await asyncio.to_thread(opened.abort)
            except FatalAgentError as exc:
                self.fatal = exc
                log.critical("agent stopping", error=str(exc))
                return
            except Exception:
                log.exception("a transfer could not be handled", requestId=transfer.request_id)
                await self._settle_after_fault(transfer)
            finally:
                self._handling = False
            self.last_progress = time.time()

    async def _answer_unless_load(self, transfer: Transfer) -> bool:
        """Answer a transfer that needs no load (refused, or applied before); True when it
        must be loaded."""
        decision = self.tracker.decide(transfer)
        if decision.action == "reject":
            code = decision.code or ErrorCode.BAD_CHUNK
            await self.outbox.refuse(transfer.framing, code, decision.message)
        elif decision.action == "answer-stored":
            entry = await self._registry_entry(transfer)
            if entry is None:  # the registry lost a delta the tracker saw: never expected
                raise FatalAgentError(f"delta {transfer.delta_num} vanished from the registry")
            # Memory keeps recent dates only: an older delta's is compared here.
            problem = check_sequence(
                transfer.delta_num, transfer.delta_date, applied_date=entry.delta_date, last=None
            )
            if problem is not None:
                await self.outbox.refuse(transfer.framing, problem.code, problem.message)
                return False
            log.info("already applied: answering the stored result", **transfer.log_ids())
            await self.outbox.answer(result_from_registry(transfer, entry))
        else:
            return True
        return False

    async def answer_replayed(self, transfer: Transfer) -> None:
        """A complete transfer of a delta applied before, of which nothing was staged: its
        stored answer. Should the registry no longer hold the delta (the database went
        back in time meanwhile), its rows are not here: the origin is told to send the
        delta again, as for a transfer removed to keep the staging budget."""
        if self.tracker.open.get(transfer.request_id) is not transfer:
            return  # answered already (superseded)
        if await self._answer_unless_load(transfer):
            every_stream = [Gap(n) for n in range(1, transfer.stream_total + 1)]
            message = removed_message(every_stream, self.tracker.limits.max_missing_items)
            await self.outbox.refuse(transfer.framing, ErrorCode.INCOMPLETE_DELTA, message)

    async def _load(
        self, transfer: Transfer, staged: StagedTransfer, opened: OpenApply | None = None
    ) -> None:
        self.tracker.load_started(transfer)
        started = time.perf_counter()
        log.info("load start", **transfer.log_ids())
        failure: tuple[ErrorCode, str] | None = None
        self._load_began = time.monotonic()
        try:
            entry = await asyncio.to_thread(self.loader.load, staged, opened)
        except ProtocolError as exc:
            failure = exc.code, exc.message
            if exc.code is ErrorCode.LOAD_FAILED:  # the store's or Spark's words: hosts, paths
                log.error("load failed", **transfer.log_ids(), error=exc.message[:2000])
                failure = exc.code, internal_error()
        except CommitStateUnknownError as exc:
            raise FatalAgentError(f"delta {transfer.delta_num}: {exc}") from exc
        except Exception:  # a bug or an environment fault: report, keep the replica
            log.exception("load failed unexpectedly", **transfer.log_ids())
            failure = ErrorCode.LOAD_FAILED, internal_error()
        finally:
            self.tracker.load_ended(transfer)
            self._load_began = None
        if failure is not None and failure[0] is ErrorCode.LOAD_FAILED:
            applied = await self._applied(transfer)  # never LOAD_FAILED for an applied delta
            if applied is not None:
                entry, failure = applied, None
        if failure is not None:
            self._mark_failed(transfer.datamart, failure[0] is ErrorCode.LOAD_FAILED)
            if failure[0] in (ErrorCode.OUT_OF_SEQUENCE, ErrorCode.DELTA_CONFLICT):
                await self._reread_registry(transfer.datamart)
            await self.outbox.refuse(transfer.framing, *failure)
            return
        if self.crash_after_commit_of == entry.delta_num:
            log.warning("fault injection: exiting after the commit, before the answer")
            os._exit(ExitCode.CRASH_INJECTED)
        seconds = time.perf_counter() - started
        self._mark_failed(transfer.datamart, False)
        self.tracker.record_applied(transfer.datamart, entry.delta_num, entry.delta_date)
        self.metrics.count_applied(transfer.datamart, entry, seconds)
        log.info(
            "applied",
            **transfer.log_ids(),
            seconds=round(seconds, 3),
            tables={
                c.table_name: [c.rows_received, c.rows_upserted, c.rows_deleted]
                for c in entry.tables
            },
        )
        await self.outbox.answer(result_from_registry(transfer, entry))
        await self.close_superseded(transfer.datamart)

    def load_seconds(self) -> float | None:
        """How long the load in progress has run (None: no load runs)."""
        began = self._load_began
        return None if began is None else round(time.monotonic() - began, 1)

    async def _reread_registry(self, datamart: str) -> None:
        """The tracker admitted the delta as the expected one, the registry (under the
        datamart's lock) did not: the database went back in time (a failover to a standby
        behind, a point-in-time restore) or another writer moved it on. The registry is the
        truth: memory takes it, so `delta.rs` tells the origin what to send next."""
        applied = await self._read_registry(datamart, changed_only=False)
        if applied is not None:
            self._take_registry(datamart, applied)

    async def _read_registry(
        self, datamart: str, *, changed_only: bool
    ) -> list[AppliedDelta] | None:
        """The datamart's last applied deltas as the registry says now (None: no reader,
        it cannot be read, which is logged, or with `changed_only` its last delta is the
        one memory holds). A read costs the same whatever the registry's length."""
        reads = self.registry_tail
        if reads is None:
            return None
        try:
            if changed_only:
                last = await asyncio.to_thread(reads.last, datamart)
                if last == self.tracker.last_applied(datamart):
                    return None
            count = self.tracker.limits.applied_window
            return await asyncio.to_thread(reads.tail, datamart, count)
        except Exception as exc:
            log.warning("the registry cannot be read again", error=repr(exc)[:300])
            return None

    async def refresh_registry(self, datamart: str, min_interval: float = 1.0) -> None:
        """Before a `delta.rs` (and now and then): the registry's last delta read again, so
        a database that went back in time while no delta arrived is told to the origin,
        which then resends what was lost. Read at most once per `min_interval` per
        datamart (a flood of `delta.rq` costs the database nothing more), and only while
        no transfer is handled: a read that a load overtook is dropped, never taken over
        memory."""
        if self.registry_tail is None or datamart not in self.tracker.schemas:
            return
        now = time.monotonic()
        if now - self._refreshed.get(datamart, -min_interval) < min_interval:
            return
        if self._handling or not self._queue.empty():
            return
        self._refreshed[datamart] = now
        taken = self._taken
        applied = await self._read_registry(datamart, changed_only=True)
        if applied is not None and self._taken == taken and not self._handling:
            self._take_registry(datamart, applied)

    def _take_registry(self, datamart: str, applied: list[AppliedDelta]) -> None:
        before = self.tracker.last_applied(datamart)
        window = AppliedWindow(applied, capacity=self.tracker.limits.applied_window)
        if window.same_as(self.tracker.applied[datamart]):
            return
        self.tracker.reset_applied(datamart, applied)
        after = self.tracker.last_applied(datamart)
        log.warning(
            "the registry disagrees with what this agent applied: taking the registry's",
            datamart=datamart,
            remembered=None if before is None else before.delta_num,
            registry=None if after is None else after.delta_num,
        )
        self.metrics.current_delta.labels(datamart).set(-1 if after is None else after.delta_num)

    def _mark_failed(self, datamart: str, failed: bool) -> None:
        if failed:
            self.failed.add(datamart)
        else:
            self.failed.discard(datamart)

    async def _applied(self, transfer: Transfer) -> RegistryEntry | None:
        """The registry's entry of the transfer's delta with its date. If the registry
        cannot be read (with backoff, about 30 s), nothing may be answered: the agent
        restarts (FatalAgentError) and recovers from staging and the registry."""
        entry = await self._registry_entry(transfer)
        return entry if entry is not None and entry.delta_date == transfer.delta_date else None

    async def _registry_entry(self, transfer: Transfer) -> RegistryEntry | None:
        """The registry's entry of the transfer's delta, whatever its date. If the registry
        cannot be read (with backoff, about 30 s), nothing may be answered: the agent
        restarts (FatalAgentError) and recovers from staging and the registry."""

        def again(_number: int, error: BaseException, _wait: float) -> None:
            log.warning("the registry cannot be read; trying again", error=repr(error)[:300])

        try:
            return await retry_async(
                lambda: asyncio.to_thread(self.registry, transfer.datamart, transfer.delta_num),
                retry_on=Exception,
                backoff=REGISTRY_BACKOFF,
                attempts=REGISTRY_ATTEMPTS,
                on_retry=again,
            )
        except Exception as exc:
            raise FatalAgentError(f"the registry cannot be read: {exc!r}") from exc

    async def _settle_after_fault(self, transfer: Transfer) -> None:
        """An unexpected error: OK if the registry shows the delta applied, else LOAD_FAILED.
        If even that cannot be done, the agent must restart (FatalAgentError)."""
        try:
            entry = await self._applied(transfer)
            if entry is not None:
                self.tracker.record_applied(transfer.datamart, entry.delta_num, entry.delta_date)
                await self.outbox.answer(result_from_registry(transfer, entry))
                return
            self._mark_failed(transfer.datamart, True)
            await self.outbox.refuse(transfer.framing, ErrorCode.LOAD_FAILED, internal_error())
        except Exception as exc:
            raise FatalAgentError(
                f"a transfer could not be answered after a fault: {exc!r}"
            ) from exc


def internal_error() -> str:
    """What the origin is told of an unexpected fault: a reference, never the fault's text
    (it may name hosts, paths or settings)."""
    reference = uuid.uuid4().hex[:12]
    log.error("internal error reference", reference=reference)
    return f"the replica failed internally (reference {reference} in its log); retry later"
