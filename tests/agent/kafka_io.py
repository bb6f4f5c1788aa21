"""Raw Kafka I/O for the agent tests: produce `delta.in`/`delta.rq`, collect the answers."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from protocol.apply_model import DeltaRow
from protocol.codec import decode_message, encode_delta_in_key, encode_message
from protocol.framing import Chunk, frame_delta
from protocol.messages import DeltaInResult, DeltaRequest, DeltaState
from protocol.schema import LogicalSchema
from tests.loader.staging_helpers import delta_date


@dataclass(frozen=True)
class Topics:
    delta_in: str
    delta_in_rs: str
    delta_rq: str
    delta_rs: str

    @classmethod
    def unique(cls) -> Topics:
        tag = uuid.uuid4().hex[:8]
        return cls(f"in-{tag}", f"in-rs-{tag}", f"rq-{tag}", f"rs-{tag}")

    def flags(self) -> dict[str, str]:
        return {
            "PODD_TOPIC_DELTA_IN": self.delta_in,
            "PODD_TOPIC_DELTA_IN_RS": self.delta_in_rs,
            "PODD_TOPIC_DELTA_RQ": self.delta_rq,
            "PODD_TOPIC_DELTA_RS": self.delta_rs,
        }


def chunks_of(
    schema: LogicalSchema,
    n: int,
    rows: dict[str, list[DeltaRow]],
    *,
    request_id: str | None = None,
    chunk_rows: int = 3,
    date: datetime | None = None,
) -> list[Chunk]:
    return list(
        frame_delta(
            schema,
            request_id=request_id or f"rq-{n}-{uuid.uuid4().hex[:8]}",
            delta_num=n,
            delta_date=date or delta_date(n),
            rows_by_table=rows,
            chunk_rows=chunk_rows,
        )
    )


@dataclass
class Origin:
    """A minimal origin: sends raw messages, reads `delta.in.rs` and `delta.rs`."""

    bootstrap: str
    topics: Topics
    partitions: int = 4
    producer: AIOKafkaProducer | None = None
    results: list[DeltaInResult] = field(default_factory=list)
    states: list[DeltaState] = field(default_factory=list)
    _readers: list[AIOKafkaConsumer] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def __aenter__(self) -> Origin:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await self.producer.start()
        for topic, sink in (
            (self.topics.delta_in_rs, self._on_result),
            (self.topics.delta_rs, self._on_state),
        ):
            reader = AIOKafkaConsumer(bootstrap_servers=self.bootstrap)
            await reader.start()
            partition = TopicPartition(topic, 0)
            reader.assign([partition])
            await reader.seek_to_beginning(partition)
            self._readers.append(reader)
            self._tasks.append(asyncio.create_task(self._read(reader, sink)))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        for reader in self._readers:
            await reader.stop()
        if self.producer is not None:
            await self.producer.stop()

    @staticmethod
    async def _read(reader: AIOKafkaConsumer, sink: Any) -> None:
        async for message in reader:
            sink(message.value)

    def _on_result(self, value: bytes) -> None:
        self.results.append(decode_message(DeltaInResult, value))

    def _on_state(self, value: bytes) -> None:
        self.states.append(decode_message(DeltaState, value))

    async def send_raw(
        self, key: bytes | None, value: bytes | None, *, partition: int | None = None
    ) -> None:
        assert self.producer is not None
        await self.producer.send_and_wait(
            self.topics.delta_in, key=key, value=value, partition=partition
        )

    async def send_chunks(
        self, chunks: Iterable[Chunk], *, shuffle: random.Random | None = None, twice: bool = False
    ) -> None:
        items = list(chunks) * (2 if twice else 1)
        if shuffle is not None:
            shuffle.shuffle(items)
        for i, chunk in enumerate(items):
            partition = shuffle.randrange(self.partitions) if shuffle else i % self.partitions
            await self.send_raw(encode_delta_in_key(chunk.key), chunk.body, partition=partition)

    async def ask(self, datamart: str, *, timeout: float = 60) -> DeltaState:
        assert self.producer is not None
        request_id = f"state-{uuid.uuid4().hex[:8]}"
        request = DeltaRequest(request_id=request_id, datamart=datamart, sent_at=datetime.now(UTC))
        await self.producer.send_and_wait(
            self.topics.delta_rq, key=datamart.encode(), value=encode_message(request)
        )
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            for state in self.states:
                if state.request_id == request_id:
                    return state
            await asyncio.sleep(0.05)
        raise TimeoutError(f"no delta.rs for {request_id}")

    async def results_of(
        self, request_id: str, count: int = 1, *, timeout: float = 120
    ) -> Sequence[DeltaInResult]:
        """The first `count` answers to the transfer `request_id`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            found = [r for r in self.results if r.request_id == request_id]
            if len(found) >= count:
                return found
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{count} answer(s) to {request_id} did not come")
