"""The origin's Kafka I/O: produce `delta.in` and `delta.rq`, collect `delta.in.rs`/`delta.rs`.

Answers are read from every partition of their topics from the earliest offset, without a
consumer group, and kept by `requestId`: an origin only waits for answers to requests it
made, and reading from the beginning does not depend on the broker's end offsets. The answers
of the last `MAX_ANSWERED` requestIds are kept (a topic's whole history is read at start).

Topics may be shared by replicas of different datamarts (docs/contracts/PROTOCOL.md, "Shared
topics"): each answers `UNKNOWN_DATAMART` for the datamarts it does not serve. Such an answer is
never taken over another's: once a replica has answered `delta.rq` for a datamart with its state,
`UNKNOWN_DATAMART` answers about that datamart are from other replicas and are set aside; a
`delta.rq` answered only `UNKNOWN_DATAMART` gets that answer after `NOT_SERVED_GRACE` seconds
without another, a transfer after its answer timeout without another.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Self, TypeVar

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from podd_kafka.batch_guard import guard_batches
from podd_kafka.client import aiokafka_options
from podd_kafka.fetch_pace import FetchPace
from podd_kafka.settings import KafkaSettings
from protocol.codec import (
    decode_message,
    encode_datamart_key,
    encode_delta_in_key,
    encode_message,
)
from protocol.errors import ErrorCode, PoddError
from protocol.framing import Chunk
from protocol.messages import DeltaInResult, DeltaRequest, DeltaState
from protocol.signing import is_authentic, signed_headers

log = structlog.get_logger("origin.client")
T = TypeVar("T")

#: Answers are kept for this many requestIds at most, the oldest forgotten first.
MAX_ANSWERED = 10_000
#: How long a `delta.rq` answered `UNKNOWN_DATAMART` waits for another replica's state.
NOT_SERVED_GRACE = 10.0
_NOT_SERVED = ErrorCode.UNKNOWN_DATAMART.value


class OriginClient:
    """One connection of an origin: a producer and two answer readers."""

    def __init__(self, settings: KafkaSettings, bootstrap: list[str]) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.results: OrderedDict[str, list[DeltaInResult]] = OrderedDict()
        self.states: OrderedDict[str, DeltaState] = OrderedDict()
        #: `UNKNOWN_DATAMART` states, set aside while another replica may answer.
        self.not_served: OrderedDict[str, DeltaState] = OrderedDict()
        #: `UNKNOWN_DATAMART` answers to transfers of a datamart a replica serves, set aside
        #: until the wait for another answer ends.
        self.not_served_results: OrderedDict[str, DeltaInResult] = OrderedDict()
        #: Datamarts some replica answered `delta.rq` for with its state.
        self.served: set[str] = set()
        self.undecodable = 0
        self.unsigned = 0  # answers dropped: not signed with the origins' key
        self._secret = settings.signing_secret()
        self._previous = settings.previous_secret()
        self._arrived = asyncio.Condition()
        self._producer: AIOKafkaProducer | None = None
        self._readers: list[AIOKafkaConsumer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._wakers: set[asyncio.Future[None]] = set()
        self.pace = FetchPace(settings.fetch_max_wait_ms, settings.fetch_idle_wait_ms)

    async def __aenter__(self) -> Self:
        guard_batches(self.settings)
        options = aiokafka_options(self.settings)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            linger_ms=0,
            compression_type=self.settings.compression_type,
            **options,
        )
        await self._producer.start()
        for topic in (self.settings.topic_delta_in_rs, self.settings.topic_delta_rs):
            reader = AIOKafkaConsumer(
                topic,
                bootstrap_servers=self.bootstrap,
                group_id=None,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                fetch_max_wait_ms=self.settings.fetch_max_wait_ms,
                **options,
            )
            self.pace.attach(reader)
            await reader.start()
            self._readers.append(reader)
            self._tasks.append(asyncio.create_task(self._read(reader, topic)))
        self._tasks.append(asyncio.create_task(self._pace_fetches()))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for reader in self._readers:
            await reader.stop()
        if self._producer is not None:
            await self._producer.stop()

    async def _pace_fetches(self) -> None:
        while True:
            self.pace.tick()
            await asyncio.sleep(0.25)

    async def _read(self, reader: AIOKafkaConsumer, topic: str) -> None:
        async for message in reader:
            self.pace.busy()
            if not is_authentic(
                self._secret, message.key, message.value, message.headers, self._previous
            ):
                self.unsigned += 1  # a forged answer (an OK) must not move this origin on
                log.warning(
                    "answer dropped: not signed with the origins' key",
                    topic=topic,
                    partition=message.partition,
                    offset=message.offset,
                )
                continue
            try:
                if topic == self.settings.topic_delta_in_rs:
                    self._take_result(decode_message(DeltaInResult, message.value or b""))
                else:
                    self._take_state(decode_message(DeltaState, message.value or b""))
            except PoddError as exc:
                self.undecodable += 1
                log.warning("undecodable answer skipped", topic=topic, error=str(exc))
                continue
            async with self._arrived:
                self._arrived.notify_all()

    def _take_result(self, result: DeltaInResult) -> None:
        if result.error_code == _NOT_SERVED and result.datamart in self.served:
            rid, datamart = result.request_id, result.datamart
            log.info(
                "set aside: the answer of a replica that does not serve the datamart",
                requestId=rid,
                datamart=datamart,
            )
            _keep(self.not_served_results, rid, result)
            return
        _keep(self.results, result.request_id, []).append(result)

    def _take_state(self, state: DeltaState) -> None:
        if state.error_code == _NOT_SERVED:
            if state.request_id not in self.states:
                _keep(self.not_served, state.request_id, state)
            return
        self.served.add(state.datamart)
        _keep(self.states, state.request_id, state)

    @property
    def producer(self) -> AIOKafkaProducer:
        """The producer. Taking it marks the client busy: a send is about to happen and its
        answer should be fetched with the short wait."""
        assert self._producer is not None, "use OriginClient in `async with`"
        self.pace.busy()
        return self._producer

    # --- sending ------------------------------------------------------------------------

    async def send_chunks(
        self,
        chunks: Iterable[Chunk],
        *,
        shuffle: random.Random | None = None,
        rows_per_second: float = 0.0,
    ) -> int:
        """Produce chunks on `delta.in` and wait for the broker's acks: in order, partitioned
        by key, or with `shuffle` in a random order, each on a random partition; with
        `rows_per_second`, each chunk once the rows before it are due at that rate."""
        topic = self.settings.topic_delta_in
        items = list(chunks)
        partitions: list[int] = []
        if shuffle is not None:
            shuffle.shuffle(items)
            partitions = sorted(await self.producer.partitions_for(topic))
        pending = []
        started, rows_before = time.perf_counter(), 0
        for chunk in items:
            if rows_per_second > 0:
                wait = started + rows_before / rows_per_second - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                rows_before += chunk.rows
            key = encode_delta_in_key(chunk.key)
            partition = shuffle.choice(partitions) if shuffle else None
            headers = self.sign(key, chunk.body)
            sent = await self.producer.send(
                topic, key=key, value=chunk.body, headers=headers, partition=partition
            )
            pending.append(sent)
        await asyncio.gather(*pending)
        return len(pending)

    async def send_raw(
        self, key: bytes | None, value: bytes | None, *, partition: int | None = None
    ) -> None:
        await self.producer.send_and_wait(
            self.settings.topic_delta_in,
            key=key,
            value=value,
            partition=partition,
            headers=self.sign(key, value),
        )

    def sign(self, key: bytes | None, value: bytes | None) -> list[tuple[str, bytes]]:
        """The headers that prove this origin (none without `PODD_ORIGIN_KEY`)."""
        return signed_headers(self._secret, key, value)

    async def request_state(self, datamart: str) -> str:
        """Send `delta.rq`; returns its requestId."""
        request_id = f"rq-{uuid.uuid4()}"
        request = DeltaRequest(request_id=request_id, datamart=datamart, sent_at=datetime.now(UTC))
        key, value = encode_datamart_key(datamart), encode_message(request)
        await self.producer.send_and_wait(
            self.settings.topic_delta_rq, key=key, value=value, headers=self.sign(key, value)
        )
        return request_id

    # --- waiting ------------------------------------------------------------------------

    async def ask(self, datamart: str, timeout: float) -> DeltaState | None:
        """`delta.rq` → `delta.rs`; None if no answer came within `timeout` seconds. An
        `UNKNOWN_DATAMART` answer counts only once no other came for `NOT_SERVED_GRACE`."""
        request_id = await self.request_state(datamart)
        loop = asyncio.get_running_loop()
        first_refusal: list[float] = []

        def answer() -> DeltaState | None:
            state = self.states.get(request_id)
            if state is not None:
                return state
            refusal = self.not_served.get(request_id)
            if refusal is None:
                return None
            if not first_refusal:
                first_refusal.append(loop.time())
                loop.call_later(NOT_SERVED_GRACE, self._wake)
            return refusal if loop.time() - first_refusal[0] >= NOT_SERVED_GRACE else None

        return await self._wait(answer, timeout)

    def _wake(self) -> None:
        """Wake the waiters, so that one whose grace has passed looks again."""

        async def notify() -> None:
            async with self._arrived:
                self._arrived.notify_all()

        task = asyncio.ensure_future(notify())
        self._wakers.add(task)  # kept until done (the loop holds tasks weakly)
        task.add_done_callback(self._wakers.discard)

    async def result(
        self, request_id: str, timeout: float, *, after: int = 0
    ) -> DeltaInResult | None:
        """The answer number `after` (0: the first) to the transfer, or None on timeout. An
        `UNKNOWN_DATAMART` set aside (another replica on shared topics may have sent it) is
        the answer only when no other came within `timeout`."""

        def found() -> DeltaInResult | None:
            answers = self.results.get(request_id) or []
            return answers[after] if len(answers) > after else None

        answer = await self._wait(found, timeout)
        if answer is None and after == 0:
            return self.not_served_results.get(request_id)
        return answer

    async def _wait(self, probe: Callable[[], T | None], timeout: float) -> T | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self._arrived:
            while (value := probe()) is None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except TimeoutError:
                    return probe()
            return value


def _keep(kept: OrderedDict[str, T], request_id: str, value: T) -> T:
    """`kept[request_id]` (set to `value` if new), the newest; at most `MAX_ANSWERED`."""
    if request_id in kept:
        kept.move_to_end(request_id)
        return kept[request_id]
    kept[request_id] = value
    while len(kept) > MAX_ANSWERED:
        kept.popitem(last=False)
    return value
