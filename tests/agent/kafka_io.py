"""Kafka I/O for the agent tests: the topics of one agent, and an origin client on them."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from aiokafka import AIOKafkaConsumer, TopicPartition

from origin.client import OriginClient
from podd_kafka.settings import KafkaSettings
from protocol.apply_model import DeltaRow
from protocol.framing import Chunk, frame_delta
from protocol.messages import DeltaInResult, DeltaState
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

    def settings(self, broker: str) -> KafkaSettings:
        return KafkaSettings(
            broker=broker,
            topic_delta_in=self.delta_in,
            topic_delta_in_rs=self.delta_in_rs,
            topic_delta_rq=self.delta_rq,
            topic_delta_rs=self.delta_rs,
        )

    def options(self) -> list[str]:
        """The four topics as command-line flags."""
        return [
            "--topic-delta-in",
            self.delta_in,
            "--topic-delta-in-rs",
            self.delta_in_rs,
            "--topic-delta-rq",
            self.delta_rq,
            "--topic-delta-rs",
            self.delta_rs,
        ]

    def flags(self) -> dict[str, str]:
        return self.settings("").topic_environment()


async def wait_consumed(
    broker: str, group_id: str, topic: str, last: Mapping[int, int], timeout: float = 300
) -> None:
    """Until the consumer group has committed past `last` (partition → the offset of the last
    message produced to it): every one of those messages was handled, whatever its verdict.
    (A `delta.rs` answer proves nothing of `delta.in`: another topic, another Faust agent.)
    The group's offsets are read by a consumer assigned by hand: it never joins the group."""
    reader = AIOKafkaConsumer(bootstrap_servers=broker, group_id=group_id, enable_auto_commit=False)
    await reader.start()
    try:
        partitions = {p: TopicPartition(topic, p) for p in last}
        reader.assign(list(partitions.values()))
        deadline = time.monotonic() + timeout
        while True:
            behind = {}
            for partition, offset in last.items():
                committed = await reader.committed(partitions[partition])
                if committed is None or committed <= offset:
                    behind[partition] = (committed, offset)
            if not behind:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{group_id} has not consumed {topic}: {behind}")
            await asyncio.sleep(0.5)
    finally:
        await reader.stop()


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


class Origin(OriginClient):
    """The reference origin's client, with the tests' conveniences: chunks sent twice,
    `delta.rq` that must be answered, and the first answers to a transfer."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        super().__init__(topics.settings(bootstrap), [bootstrap])

    async def send_chunks(
        self,
        chunks: Iterable[Chunk],
        *,
        shuffle: random.Random | None = None,
        twice: bool = False,
        rows_per_second: float = 0.0,
    ) -> int:
        return await super().send_chunks(
            list(chunks) * (2 if twice else 1), shuffle=shuffle, rows_per_second=rows_per_second
        )

    async def ask(self, datamart: str, timeout: float = 60) -> DeltaState:
        state = await super().ask(datamart, timeout)
        if state is None:
            raise TimeoutError(f"no delta.rs for {datamart}")
        return state

    async def results_of(
        self, request_id: str, count: int = 1, *, timeout: float = 120
    ) -> Sequence[DeltaInResult]:
        """The first `count` answers to the transfer `request_id`."""
        if await self.result(request_id, timeout, after=count - 1) is None:
            raise TimeoutError(f"{count} answer(s) to {request_id} did not come")
        return self.results[request_id][:count]
