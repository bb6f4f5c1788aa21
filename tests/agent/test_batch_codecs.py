"""The agent reads `delta.in` in every Kafka codec, and a batch it cannot read is skipped
(counted, its offsets logged) while the agent lives on: real Tansu, PostgreSQL, Spark."""

from __future__ import annotations

import asyncio
import os

import pytest

from conformance.forges import raw_batches as rb
from origin.client import OriginClient
from protocol.apply_model import ReplicaModel, apply_delta
from protocol.codec import encode_delta_in_key
from protocol.messages import DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from tests.agent.conftest import AgentProcess, agent_fixture
from tests.agent.kafka_io import chunks_of
from tests.agent.test_hostile import metric
from tests.agent.test_integration import outcome
from tests.loader.staging_helpers import assert_matches_model, delta_date

pytestmark = pytest.mark.slow

MiB = 2**20
agent = agent_fixture(5, incomplete_timeout=600)


async def send_delta(
    agent: AgentProcess, schema: LogicalSchema, n: int, compression: str | None
) -> tuple[DeltaStatus, ReplicaModel]:
    rows = Workload(schema, WorkloadSpec(rows_per_delta=40, seed=n)).next_delta()
    settings = agent.topics.settings(agent.broker).model_copy(
        update={"compression_type": compression}
    )
    async with OriginClient(settings, [agent.broker]) as origin:
        chunks = chunks_of(schema, n, rows, chunk_rows=9)
        await origin.send_chunks(chunks)
        result = await outcome(origin, chunks[0].key.request_id)
    model, _ = apply_delta(ReplicaModel(schema), n, delta_date(n), rows)
    return result.status, model


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_a_delta_in_each_kafka_codec_applies(
    agent: AgentProcess, replica_dsn: str, compression: str
) -> None:
    schema = agent.take()
    status, model = asyncio.run(send_delta(agent, schema, 0, compression))
    assert status is DeltaStatus.OK
    assert_matches_model(replica_dsn, model)


def test_unreadable_batches_are_skipped_and_the_agent_lives_on(
    agent: AgentProcess, replica_dsn: str
) -> None:
    schema = agent.take()
    before = metric(agent, "podd_poison_batches_total")
    starts = agent.starts
    key = encode_delta_in_key(chunks_of(schema, 0, {}, chunk_rows=1)[0].key)
    broken = [
        rb.with_payload(rb.record_batch([(key, b"x" * 50)] * 3), "snappy", os.urandom(300)),
        rb.bad_crc(rb.record_batch([(key, b"y" * 50)])),
        rb.zstd_bomb(rb.record_batch([(key, b"z")]), 1024 * MiB),
    ]
    bootstrap = agent.topics.settings(agent.broker).bootstrap_servers()

    async def poison() -> None:
        for partition in range(4):  # wherever the agent reads
            for raw in broken:
                await rb.send_raw(bootstrap, agent.topics.delta_in, partition, raw)

    asyncio.run(poison())
    status, model = asyncio.run(send_delta(agent, schema, 0, None))
    assert status is DeltaStatus.OK
    assert_matches_model(replica_dsn, model)
    assert metric(agent, "podd_poison_batches_total") - before == 12
    assert agent.starts == starts
    assert agent.process.poll() is None
    assert "a record batch that cannot be read was skipped" in agent.log_text()
