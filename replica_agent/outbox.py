"""Every `delta.in.rs` answer, in one place: decided, recorded, sent, settled.

A transfer's final answer (OK or ERROR) is recorded durably first (`AnswerRecords`: once, a
transfer never gets two different answers), then sent, then settled: marked sent, the
transfer finished in the tracker and its staged files removed. A restart resends what is
owed, so an answer is delivered at least once. The one answer that is not final,
INCOMPLETE_DELTA at a transfer's deadline, is sent but not recorded: the transfer stays open
and a restart re-arms it. Every ERROR answer is counted, logged, and becomes its datamart's
last error (for `delta.rs` and `replica-agent status`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from protocol.errors import ErrorCode
from protocol.gaps import incomplete_message, removed_message
from protocol.messages import DeltaInResult
from replica_agent.answer_records import AnswerRecords
from replica_agent.answers import LastError, error_result
from replica_agent.backpressure import Backpressure
from replica_agent.chunk_spool import ChunkSpool
from replica_agent.metrics import AgentMetrics
from replica_agent.tracker import TransferTracker
from replica_agent.transfers import Transfer, TransferFraming

log = structlog.get_logger("replica_agent")

SendResult = Callable[[DeltaInResult], Awaitable[None]]


class Outbox:
    def __init__(
        self,
        *,
        records: AnswerRecords,
        send_result: SendResult,
        tracker: TransferTracker,
        spool: ChunkSpool,
        metrics: AgentMetrics,
        pause: Backpressure | None = None,
    ) -> None:
        self.records = records
        #: An answer that cannot be recorded (a full disk) waits here, never skipped.
        self.pause = pause or Backpressure()
        self.send_result = send_result
        self.tracker = tracker
        self.spool = spool
        self.metrics = metrics
        #: Each served datamart's latest ERROR answer.
        self.last_errors: dict[str, LastError] = {}
        #: Transfers whose answer is being delivered now (by `answer` or `deliver`).
        self._delivering: set[str] = set()

    async def answer(self, result: DeltaInResult) -> None:
        """The transfer's final answer: recorded once, then delivered. The transfer is
        finished first, so no chunk arriving meanwhile reopens it. A transfer whose answer
        another path is delivering right now is left to it: one answer, sent once."""
        request_id = result.request_id
        if request_id in self._delivering:
            log.info("the transfer is being answered already", requestId=request_id)
            return
        self._delivering.add(request_id)
        try:
            transfer = self.tracker.finish(request_id)
            recorded = await self.pause.retry(
                "recording an answer", lambda: asyncio.to_thread(self.records.owe, result)
            )
            if recorded != result:
                log.warning(
                    "the transfer was answered before: resending that answer", requestId=request_id
                )
            await self._send_and_settle(recorded, transfer)
        finally:
            self._delivering.discard(request_id)

    async def deliver(self, result: DeltaInResult) -> None:
        """Send a restart's owed answer, then settle it (unless it is being delivered)."""
        if result.request_id in self._delivering:
            return
        self._delivering.add(result.request_id)
        try:
            await self._send_and_settle(result, None)
        finally:
            self._delivering.discard(result.request_id)

    async def _send_and_settle(self, result: DeltaInResult, transfer: Transfer | None) -> None:
        """`transfer`: what the tracker held of it, for the log."""
        await self._send(result)
        await self.pause.retry(
            "settling an answer", lambda: asyncio.to_thread(self._settle, result.request_id)
        )
        self.metrics.open_transfers.set(len(self.tracker.open))
        log.info(
            "answered",
            requestId=result.request_id,
            datamart=result.datamart,
            deltaNum=result.delta_num,
            status=result.status.value,
            errorCode=result.error_code,
            seconds=None if transfer is None else transfer.seconds_since_first(),
        )

    def _settle(self, request_id: str) -> None:
        self.records.sent(request_id)
        self.spool.remove(request_id)

    async def refuse(
        self, framing: TransferFraming, code: ErrorCode, message: str, *, event: str = "rejected"
    ) -> None:
        """Answer a transfer ERROR with `code` (final)."""
        self._record_error(framing, code, message, event)
        await self.answer(error_result(framing, code, message))

    async def evicted(self, transfer: Transfer) -> None:
        """Answer a transfer removed to keep a budget. Its files go first: on a full disk
        the answer's record needs the room they free (nothing of an evicted transfer is
        kept anyway; a crash before the answer leaves the origin to ask `delta.rq`)."""
        await asyncio.to_thread(self.spool.remove, transfer.request_id)
        message = removed_message(transfer.gaps(), self.tracker.limits.max_missing_items)
        await self.refuse(transfer.framing, ErrorCode.INCOMPLETE_DELTA, message, event="evicted")

    async def report_overdue(self, now: float) -> None:
        """Answer INCOMPLETE_DELTA for transfers past their deadline; they stay open."""
        for transfer in self.tracker.overdue(now):
            self.tracker.reported_incomplete(transfer)  # re-armed by the next new chunk
            message = incomplete_message(transfer.gaps(), self.tracker.limits.max_missing_items)
            self._record_error(transfer.framing, ErrorCode.INCOMPLETE_DELTA, message, "incomplete")
            await self._send(error_result(transfer, ErrorCode.INCOMPLETE_DELTA, message))

    async def _send(self, result: DeltaInResult) -> None:
        await self.send_result(result)
        answer = result.error_code or result.status.value
        self.metrics.answers.labels(self._label(result.datamart), answer).inc()

    def _label(self, datamart: str) -> str:
        """A metric's datamart label: the datamart if served, else empty (a name a message
        claims never grows a label set)."""
        return datamart if datamart in self.tracker.schemas else ""

    def _record_error(
        self, framing: TransferFraming, code: ErrorCode, message: str, event: str
    ) -> None:
        """Count and log an ERROR answer; it becomes its datamart's last error."""
        label = self._label(framing.datamart)
        if label:
            self.last_errors[label] = LastError(code.value, message, framing.request_id)
        self.metrics.rejections.labels(label, code.value).inc()
        log.warning(event, **framing.log_ids(), errorCode=code.value, errorMessage=message[:2000])
