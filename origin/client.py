"""The origin's Kafka I/O: produce `delta.in` and `delta.rq`, collect `delta.in.rs`/`delta.rs`.

Answers are read from every partition of their topics from the earliest offset, without a
consumer group, and kept by `requestId`: an origin only waits for answers to requests it
made, and reading from the beginning does not depend on the broker's end offsets.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import defaultdict
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
from protocol.errors import PoddError
from protocol.framing import Chunk
from protocol.messages import DeltaInResult, DeltaRequest, DeltaState
from protocol.signing import is_authentic, signed_headers

log = structlog.get_logger("origin.client")
T = TypeVar("T")


class OriginClient:
    """One connection of an origin: a producer and two answer readers."""

    def __init__(self, settings: KafkaSettings, bootstrap: list[str]) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.results: dict[str, list[DeltaInResult]] = defaultdict(list)
        self.states: dict[str, DeltaState] = {}
        self.undecodable = 0
        self.unsigned = 0  # answers dropped: not signed with the origins' key
        self._secret = settings.signing_secret()
        self._previous = settings.previous_secret()
        self._arrived = asyncio.Condition()
        self._producer: AIOKafkaProducer | None = None
        self._readers: list[AIOKafkaConsumer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.pace = FetchPace(settings.fetch_max_wait_ms, settings.fetch_idle_wait_ms)

    async def __aenter__(self) -> Self:
        guard_batches(self.settings)
        options = aiokafka_options(self.settings)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", linger_ms=0,
            compression_type=self.settings.compression_type, **options,
        )  # fmt: skip
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
                log.warning("answer dropped: not signed with the origins' key", topic=topic,
                            partition=message.partition, offset=message.offset)  # fmt: skip
                continue
            try:
                if topic == self.settings.topic_delta_in_rs:
                    result = decode_message(DeltaInResult, message.value or b"")
                    self.results[result.request_id].append(result)
                else:
                    state = decode_message(DeltaState, message.value or b"")
                    self.states[state.request_id] = state
            except PoddError as exc:
                self.undecodable += 1
                log.warning("undecodable answer skipped", topic=topic, error=str(exc))
                continue
            async with self._arrived:
                self._arrived.notify_all()

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
            self.settings.topic_delta_in, key=key, value=value, partition=partition,
            headers=self.sign(key, value),
        )  # fmt: skip

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
        """`delta.rq` → `delta.rs`; None if no answer came within `timeout` seconds."""
        request_id = await self.request_state(datamart)
        return await self._wait(lambda: self.states.get(request_id), timeout)

    async def result(
        self, request_id: str, timeout: float, *, after: int = 0
    ) -> DeltaInResult | None:
        """The answer number `after` (0: the first) to the transfer, or None on timeout."""

        def found() -> DeltaInResult | None:
            answers = self.results.get(request_id, [])
            return answers[after] if len(answers) > after else None

        return await self._wait(found, timeout)

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
