"""Old signed transfers replayed beside a valid delta: real Tansu, PostgreSQL and Spark,
the agent a process with a shared key.

The signature covers key and value only, so a signed message stays valid as long as Kafka
keeps it. Before, each replayed transfer of an applied delta was accepted as a transfer like
any other: it took an open-transfer slot and staging budget and never completed, and the
eviction rule (fewest chunks first) evicted the real origin's transfer, which had just
begun, at every resend. Now a replay stages nothing, takes no slot, and the valid delta
applies on its first attempt."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

from protocol.codec import encode_datamart_key, encode_message
from protocol.framing import Chunk
from protocol.messages import DeltaInResult, DeltaRequest, DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from tests.agent.conftest import AgentProcess, agent_fixture
from tests.agent.kafka_io import chunks_of
from tests.agent.test_hostile import metric
from tests.agent.test_integration import outcome
from tests.agent.test_signed_origins import KEY, client

agent = agent_fixture(
    2,
    incomplete_timeout=600,
    extra_env={"PODD_ORIGIN_KEY": KEY, "PODD_MAX_OPEN_TRANSFERS": "2", "PODD_MAX_REPLAYS": "4"},
)


def replayed(chunks: list[Chunk]) -> list[Chunk]:
    """A transfer's chunks under a requestId the agent no longer remembers, its last chunk
    held back (a replay is cut where Kafka's retention cut it): it never completes."""
    request_id = f"old-{uuid.uuid4().hex[:8]}"
    renamed = [
        dataclasses.replace(c, key=c.key.model_copy(update={"request_id": request_id}))
        for c in chunks
    ]
    return renamed[:-1]


def test_a_replay_flood_beside_a_valid_delta_costs_it_nothing(
    agent: AgentProcess,
) -> None:
    schema: LogicalSchema = agent.take()
    workload = Workload(schema, WorkloadSpec(rows_per_delta=60, seed=41))
    first = chunks_of(schema, 0, workload.next_delta(), chunk_rows=5)
    second = workload.next_delta()

    async def scenario() -> tuple[DeltaInResult, list[DeltaInResult]]:
        async with client(agent, KEY) as origin:
            await origin.send_chunks(first)
            assert (await outcome(origin, first[0].key.request_id)).status is DeltaStatus.OK
            for _ in range(12):  # replays of delta 0, each many chunks long
                await origin.send_chunks(replayed(first))
            real = chunks_of(schema, 1, second, chunk_rows=5)
            # The valid delta's chunks go out one by one between more replays.
            for chunk in real:
                await origin.send_chunks([chunk])
                await origin.send_chunks(replayed(first))
            result = await outcome(origin, real[0].key.request_id)
            await asyncio.sleep(1)
            return result, list(origin.results.get(real[0].key.request_id, []))

    result, answers = asyncio.run(scenario())
    assert result.status is DeltaStatus.OK, result
    assert [a.status for a in answers] == [DeltaStatus.OK]  # never evicted, never incomplete
    assert metric(agent, "podd_deltas_applied_total") == 2
    assert metric(agent, 'podd_chunks_dropped_total{reason="replay"}') > 0
    assert "evicted" not in agent.log_text()


def test_a_replayed_signed_delta_rq_is_dropped_and_a_fresh_one_answered(
    agent: AgentProcess,
) -> None:
    """A signed `delta.rq` stays valid as long as Kafka keeps it; one sent an hour ago is a
    replay, and its answer would help nobody: it is dropped, counted, unanswered."""
    schema: LogicalSchema = agent.take()
    before = metric(agent, 'podd_chunks_dropped_total{reason="stale"}')

    async def scenario() -> tuple[bool, bool]:
        async with client(agent, KEY) as origin:
            old = DeltaRequest(
                request_id="rq-old",
                datamart=schema.datamart,
                sent_at=datetime.now(UTC) - timedelta(hours=1),
            )
            key, value = encode_datamart_key(schema.datamart), encode_message(old)
            await origin.producer.send_and_wait(
                agent.topics.delta_rq, key=key, value=value, headers=origin.sign(key, value)
            )
            fresh = await origin.ask(schema.datamart, timeout=60)
            await asyncio.sleep(1)
            return fresh is not None, "rq-old" in origin.states

    answered_fresh, answered_old = asyncio.run(scenario())
    assert answered_fresh
    assert not answered_old
    assert metric(agent, 'podd_chunks_dropped_total{reason="stale"}') == before + 1
