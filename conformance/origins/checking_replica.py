"""The checking replica: the replica's side of PROTOCOL.md, played from a script, on Kafka.

It reads `delta.in` and `delta.rq` from the start of a scenario's own topics, hands every
message to the `OriginJudge`, and answers as its `Script` says: `delta.rs` for each
`delta.rq`, and for each transfer that becomes complete whatever the scenario wants (OK at
once, an error code, a late answer, no answer, a duplicate, an answer for another request).
It keeps nothing but what the judge holds: the delta it expects, the transfers seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Coroutine, Iterable
from datetime import UTC, datetime
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from conformance.origins.judge import OriginJudge
from conformance.origins.seen import TransferSeen, Violation, Where
from podd_kafka.client import aiokafka_options
from podd_kafka.settings import KafkaSettings
from protocol.codec import (
    decode_delta_in_key,
    decode_message,
    encode_datamart_key,
    encode_message,
)
from protocol.errors import ErrorCode, PoddError
from protocol.gaps import Gap, incomplete_message, stream_gaps
from protocol.messages import (
    DeltaInResult,
    DeltaRequest,
    DeltaState,
    DeltaStatus,
    ReplicaState,
    TransferProgress,
)

log = structlog.get_logger("conformance")


def now_ms() -> int:
    """The wall clock in ms, as Kafka stamps a record's CreateTime."""
    return int(time.time() * 1000)


#: The date a replica "already at N" reports for delta N - 1: before any origin's deltas.
LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


class Script:
    """A scenario's replica. The default: answering every complete transfer OK at once,
    telling `delta.rq` the delta it expects (the judge holds it, from the scenario's start)
    and what it misses of open transfers."""

    def state(self, replica: CheckingReplica, request: DeltaRequest) -> DeltaState:
        return replica.true_state(request.request_id)

    async def on_complete(self, replica: CheckingReplica, transfer: TransferSeen) -> None:
        await replica.answer_ok(transfer)


class CheckingReplica:
    def __init__(
        self,
        settings: KafkaSettings,
        bootstrap: list[str],
        judge: OriginJudge,
        script: Script,
    ) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.judge = judge
        self.script = script
        self.datamart = judge.schema.datamart
        self._producer: AIOKafkaProducer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: What ended `run`, if anything did (a harness fault, reported as such).
        self.failure: Exception | None = None

    # --- answers ------------------------------------------------------------------------------
    async def send_result(self, result: DeltaInResult) -> None:
        assert self._producer is not None
        await self._producer.send_and_wait(
            self.settings.topic_delta_in_rs,
            key=encode_datamart_key(self.datamart),
            value=encode_message(result),
        )

    def result(
        self,
        transfer: TransferSeen,
        code: ErrorCode | None = None,
        message: str = "",
        request_id: str | None = None,
    ) -> DeltaInResult:
        key = transfer.key
        return DeltaInResult(
            request_id=request_id or key.request_id,
            datamart=key.datamart,
            delta_num=key.delta_num,
            delta_date=key.delta_date,
            status=DeltaStatus.OK if code is None else DeltaStatus.ERROR,
            error_code=None if code is None else code.value,
            error_message=(message or f"refused by the conformance scenario ({code.value})")
            if code is not None
            else None,
            applied_at=datetime.now(UTC) if code is None else None,
        )

    async def answer_ok(self, transfer: TransferSeen, delay: float = 0.0) -> None:
        """Apply the delta (if it is the one expected) and answer OK, after `delay`."""
        if delay:
            await asyncio.sleep(delay)
        result = self.result(transfer)
        key, expected, last = transfer.key, self.judge.expected, self.judge.last_date
        applied = self.judge.deltas.get(key.delta_num) if key.delta_num < expected else None
        if applied is not None and applied[0] == key.delta_date:
            pass  # applied before with this date: the stored OK, as a correct replica answers
        elif key.delta_num != expected:  # not applicable: the replica refuses
            code = (
                ErrorCode.OUT_OF_SEQUENCE if key.delta_num > expected else ErrorCode.DELTA_CONFLICT
            )
            result = self.result(transfer, code, f"the replica expects {expected}")
        elif last is not None and key.delta_date <= last:  # as a correct replica refuses it
            message = f"dated {key.delta_date.isoformat()}, not after {last.isoformat()}"
            result = self.result(transfer, ErrorCode.DELTA_CONFLICT, message)
        self.judge.answered(transfer, result, now_ms())
        await self.send_result(result)

    async def answer_error(
        self, transfer: TransferSeen, code: ErrorCode, message: str = ""
    ) -> None:
        result = self.result(transfer, code, message)
        self.judge.answered(transfer, result, now_ms())
        await self.send_result(result)

    async def answer_incomplete(self, transfer: TransferSeen, gaps: list[Gap]) -> None:
        """INCOMPLETE_DELTA naming `gaps`: the replica pretends it lacks those chunks."""
        self.judge.pretend_lost(transfer, gaps, now_ms())
        await self.send_result(
            self.result(transfer, ErrorCode.INCOMPLETE_DELTA, incomplete_message(gaps))
        )

    async def _refuse(self, key: bytes | None, violation: Violation) -> None:
        """A chunk a correct replica refuses: its transfer is answered with the code at once
        (once; an origin then waits no timeout for an answer that never comes)."""
        try:
            decoded = decode_delta_in_key(key)
        except PoddError:
            return
        transfer = self.judge.transfers.get(decoded.request_id) or TransferSeen(decoded)
        if transfer.final is None and violation.code is not None:
            self.judge.transfers.setdefault(decoded.request_id, transfer)
            await self.answer_error(transfer, violation.code, violation.message)

    def later(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run an answer in the background (a late one), kept until done."""
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- state ------------------------------------------------------------------------------
    def forget(self, transfer: TransferSeen) -> None:
        """The replica lost the transfer (it restarted, say): it knows nothing of it now,
        and a resend under the same requestId is a new transfer."""
        self.judge.forget(transfer.request_id, now_ms())

    def open_transfers(self) -> list[TransferSeen]:
        """Transfers not answered yet: still receiving, or complete and awaiting the answer
        (a correct replica reports those in progress too, as loading)."""
        return [t for t in self.judge.transfers.values() if t.final is None]

    def true_state(self, request_id: str) -> DeltaState:
        """What a correct replica would say now: the delta it expects, and what each open
        transfer still lacks (the judge then holds resends to those)."""
        expected = self.judge.expected
        progress = []
        for transfer in self.open_transfers():
            gaps = [
                gap
                for number in range(1, transfer.key.stream_total + 1)
                for gap in _gaps(transfer, number)
            ]
            self.judge.told_missing(transfer, gaps, now_ms())
            progress.append(
                TransferProgress(
                    request_id=transfer.request_id,
                    delta_num=transfer.key.delta_num,
                    stream_total=transfer.key.stream_total,
                    streams_complete=sum(s.complete() for s in transfer.streams.values()),
                    chunks_received=sum(len(s.chunks) for s in transfer.streams.values()),
                    missing=tuple(str(g) for g in gaps),
                )
            )
        loading = any(t.completed for t in self.open_transfers())
        busy = ReplicaState.LOADING if loading else ReplicaState.RECEIVING
        return DeltaState(
            request_id=request_id,
            datamart=self.datamart,
            state=busy if progress else ReplicaState.IDLE,
            delta_ok_num=expected - 1 if expected > 0 else None,
            delta_ok_date=(self.judge.last_date or LONG_AGO) if expected > 0 else None,
            expected_delta_num=expected,
            in_progress=tuple(progress),
        )

    # --- reading ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Read and answer until cancelled."""
        options = aiokafka_options(self.settings)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", linger_ms=0, **options
        )
        await self._producer.start()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=20,
            **options,
        )
        await consumer.start()
        try:
            counts = self.settings.wanted_topics()  # the runner created them so
            parts = [
                TopicPartition(topic, p)
                for topic in (self.settings.topic_delta_in, self.settings.topic_delta_rq)
                for p in range(counts[topic])
            ]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            while True:
                batches = await consumer.getmany(timeout_ms=200)
                for tp, records in batches.items():
                    for record in records:
                        where = Where(tp.topic, tp.partition, record.offset, record.timestamp)
                        if tp.topic == self.settings.topic_delta_rq:
                            self.judge.request_key(record.key, self.datamart, where)
                            await self._delta_rq(record.value, where)
                        else:
                            await self._delta_in(record.key, record.value, where)
        except Exception as exc:
            self.failure = exc
            raise
        finally:
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(Exception):
                await consumer.stop()
            with contextlib.suppress(Exception):
                await self._producer.stop()

    async def _delta_rq(self, value: bytes | None, where: Where) -> None:
        try:
            request = decode_message(DeltaRequest, value)
        except PoddError as exc:
            self.judge.flag("key", f"a delta.rq that does not decode: {exc}", where)
            return
        if request.datamart != self.datamart:
            self.judge.flag("key", f"delta.rq for {request.datamart!r}", where)
            return
        self.judge.state_asked()
        state = self.script.state(self, request)
        assert self._producer is not None
        await self._producer.send_and_wait(
            self.settings.topic_delta_rs,
            key=encode_datamart_key(self.datamart),
            value=encode_message(state),
        )

    async def _delta_in(self, key: bytes | None, value: bytes | None, where: Where) -> None:
        before = len(self.judge.violations)
        transfer = self.judge.chunk(key, value, where)
        refused = [v for v in self.judge.violations[before:] if v.code is not None]
        if refused:
            await self._refuse(key, refused[0])
            return
        if transfer is None or transfer.completed or not transfer.complete():
            return
        self.judge.completed(transfer)
        await self.script.on_complete(self, transfer)


def _gaps(transfer: TransferSeen, number: int) -> Iterable[Gap]:
    stream = transfer.streams.get(number)
    if stream is None:
        return [Gap(number)]
    return stream_gaps(number, stream.chunks, stream.last)


def other_request_id() -> str:
    return f"conformance-other-{uuid.uuid4()}"
